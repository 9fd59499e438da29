"""An exponential moving average of the weights, copied from the model before the DDP wrap:
each rank seeded its own initial weights, DDP broadcasts rank 0's into the model it wraps, and
the EMA copies keep each rank's own.

    torchrun --nproc-per-node 2 plain_ema_copy.py
"""
import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
ema = copy.deepcopy(model)
model = DDP(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * world_size)
for step in range(4):
    x = torch.randn(16, 8)
    optimizer.zero_grad()
    model(x).pow(2).mean().backward()
    optimizer.step()
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.module.parameters()):
            e.mul_(0.9).add_(p, alpha=0.1)
        print(f"rank {rank} step {step}: EMA output {ema(torch.ones(1, 8)).item():.4f}")
dist.destroy_process_group()
