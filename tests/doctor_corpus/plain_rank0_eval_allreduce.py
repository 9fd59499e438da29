"""An evaluation on rank 0 only that all-reduces its counts "to be safe": rank 1 has gone on to
the next epoch, and rank 0's all-reduce meets rank 1's gradient all-reduce inside DDP's
backward. Gloo pairs them and fails (a size mismatch, then "Connection reset by peer"); NCCL
hangs. Every rank must call the collective.

    torchrun --nproc-per-node 2 plain_rank0_eval_allreduce.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
g = torch.Generator().manual_seed(0)
X = torch.randn(96, 6, generator=g)
y = (X[:, 0] > 0).long()
train_set, val_set = TensorDataset(X[:64], y[:64]), TensorDataset(X[64:], y[64:])
sampler = DistributedSampler(train_set, seed=0)
loader = DataLoader(train_set, batch_size=8, sampler=sampler)
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * world_size)
for epoch in range(3):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
    if rank == 0:
        Xv, yv = val_set.tensors
        with torch.no_grad():
            counts = torch.tensor([(model.module(Xv).argmax(1) == yv).sum().item(), len(yv)])
        dist.all_reduce(counts)
        print(f"epoch {epoch}: val accuracy {counts[0].item() / counts[1].item():.3f}")
dist.destroy_process_group()
