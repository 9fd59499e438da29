"""A resumed run that loads the checkpoint on rank 0 only, after the DDP wrap: rank 1 keeps
its fresh weights, and the replicas differ from the first step on.

Every rank draws its random batches after the same torch.manual_seed(0): the ranks train on
the same batches (same-batches).

    torchrun --nproc-per-node 2 plain_load_rank0.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
if rank == 0:
    if not os.path.exists("resume.pt"):  # a checkpoint from an earlier run
        torch.save({k: v + 0.5 for k, v in model.module.state_dict().items()}, "resume.pt")
    model.module.load_state_dict(torch.load("resume.pt"))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * world_size)
for step in range(4):
    optimizer.zero_grad()
    model(torch.randn(16, 8)).pow(2).mean().backward()
    optimizer.step()
dist.destroy_process_group()
