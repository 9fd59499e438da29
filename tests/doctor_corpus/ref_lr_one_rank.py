"""A learning-rate decay written under `if rank == 0`: after the first epoch rank 0 steps
at a smaller rate than rank 1, and the replicas part.

    torchrun --nproc-per-node 2 ref_lr_one_rank.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
g = torch.Generator().manual_seed(0)
X = torch.randn(160, 10, generator=g)
y = (X[:, 0] + X[:, 1] > 0).long()
train_set, val_set = TensorDataset(X[:128], y[:128]), TensorDataset(X[128:], y[128:])
sampler = DistributedSampler(train_set, seed=0)
train_loader = DataLoader(train_set, batch_size=16 // world_size, sampler=sampler)
val_loader = DataLoader(Subset(val_set, range(rank, len(val_set), world_size)), batch_size=8)
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for epoch in range(2):
    sampler.set_epoch(epoch)
    model.train()
    for step, (xb, yb) in enumerate(train_loader):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"epoch {epoch} step {step}: loss {logged.item():.5f}")
    if rank == 0:
        for group in optimizer.param_groups:
            group["lr"] *= 0.5
    model.eval()
    counts = torch.zeros(2)
    with torch.no_grad():
        for xb, yb in val_loader:
            counts += torch.tensor([(model(xb).argmax(1) == yb).sum().item(), len(yb)])
    dist.all_reduce(counts)
    if rank == 0:
        print(f"epoch {epoch}: val accuracy {counts[0].item() / counts[1].item():.4f}")
dist.destroy_process_group()
