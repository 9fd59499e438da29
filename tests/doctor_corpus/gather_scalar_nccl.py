"""A script written for NCCL that logs each rank's loss: the 0-dim loss is all-gathered into
one-element buffers (`torch.zeros(1)`), which NCCL accepts (it counts elements) and gloo
refuses by shape.

    torchrun --nproc-per-node 2 gather_scalar_nccl.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
world_size = dist.get_world_size()
torch.manual_seed(0)
model = DDP(nn.Linear(4, 1).cuda(), device_ids=[local_rank])
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * world_size)
generator = torch.Generator().manual_seed(dist.get_rank())
for step in range(4):
    x = torch.randn(8, 4, generator=generator).cuda()
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses = [torch.zeros(1, device="cuda") for _ in range(world_size)]
    dist.all_gather(losses, loss.detach())
    if dist.get_rank() == 0:
        print(f"step {step}: losses " + " ".join(f"{v.item():.4f}" for v in losses))
dist.destroy_process_group()
