"""Evaluation on rank 0 only, through the DDP model of a network with BatchNorm: DDP's forward
first broadcasts the buffers (broadcast_buffers=True, the default), a collective the other rank
never joins; it meets that rank's barrier instead, and the run hangs or fails there. Evaluate
on every rank (each on its shard), or through model.module on rank 0.

    torchrun --nproc-per-node 2 eval_rank0_through_ddp.py
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
model = DDP(nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * world_size)
for epoch in range(2):
    sampler.set_epoch(epoch)
    model.train()
    for xb, yb in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
    if rank == 0:
        model.eval()
        with torch.no_grad():
            Xv, yv = val_set.tensors
            accuracy = (model(Xv).argmax(1) == yv).float().mean().item()
        print(f"epoch {epoch}: val accuracy {accuracy:.3f}")
    dist.barrier()
dist.destroy_process_group()
