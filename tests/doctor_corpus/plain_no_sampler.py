"""A DDP script whose DataLoader shuffles on its own, with no DistributedSampler: every rank
goes through the whole dataset each epoch.

    torchrun --nproc-per-node 2 plain_no_sampler.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
world_size = dist.get_world_size()
torch.manual_seed(0)
X = torch.randn(64, 10)
y = X.sum(dim=1, keepdim=True)
loader = DataLoader(TensorDataset(X, y), batch_size=16, shuffle=True)

model = DDP(nn.Linear(10, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * world_size)
for epoch in range(3):
    for xb, yb in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
dist.destroy_process_group()
