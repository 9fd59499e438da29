"""A model with BatchNorm wrapped with broadcast_buffers=False: each rank keeps its own running
statistics, and the replicas' buffers drift apart.

    torchrun --nproc-per-node 2 plain_bn_buffers.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
model = DDP(model, broadcast_buffers=False)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * world_size)
g = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
for step in range(4):
    x = torch.randn(16, 8, generator=g)
    optimizer.zero_grad()
    model(x).pow(2).mean().backward()
    optimizer.step()
dist.destroy_process_group()
