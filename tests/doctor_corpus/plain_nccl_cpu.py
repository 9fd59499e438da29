"""A DDP script written for NCCL whose loss for logging is all-reduced from a tensor made on
the CPU (torch.tensor(loss.item())): NCCL refuses it.

Every rank draws its random batches after the same torch.manual_seed(0): the ranks train on
the same batches (same-batches).

    torchrun --nproc-per-node 2 plain_nccl_cpu.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl")
device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
torch.manual_seed(0)
model = DDP(nn.Linear(4, 1).to(device))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    loss = model(torch.randn(8, 4, device=device)).pow(2).mean()
    loss.backward()
    optimizer.step()
    logged = torch.tensor(loss.item())
    dist.all_reduce(logged)
    if dist.get_rank() == 0:
        print(f"step {step}: loss {logged.item() / dist.get_world_size():.4f}")
dist.destroy_process_group()
