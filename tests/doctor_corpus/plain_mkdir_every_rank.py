"""A checkpoint folder made per epoch on every rank with os.mkdir (the rank-0 guard around
the save is missing): the first rank creates it and the other fails with FileExistsError.

    torchrun --nproc-per-node 2 plain_mkdir_every_rank.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
world_size = dist.get_world_size()
g = torch.Generator().manual_seed(0)
X = torch.randn(64, 6, generator=g)
dataset = TensorDataset(X, (X[:, 0] > 0).long())
sampler = DistributedSampler(dataset, seed=0)
loader = DataLoader(dataset, batch_size=8, sampler=sampler)
torch.manual_seed(0)
model = DDP(nn.Linear(6, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * world_size)
os.makedirs("checkpoints", exist_ok=True)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
    folder = os.path.join("checkpoints", f"epoch-{epoch}")
    os.mkdir(folder)
    torch.save(model.module.state_dict(), os.path.join(folder, "model.pt"))
dist.destroy_process_group()
