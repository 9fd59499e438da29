"""A DDP script that waits for the others at the end, but on rank 0 only: rank 0 hangs in
the barrier.

    torchrun --nproc-per-node 2 plain_rank0_barrier.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
model = DDP(nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    optimizer.step()
if rank == 0:
    torch.save(model.module.state_dict(), "model.pt")
    dist.barrier()  # wait until the others are done (they never come here)
dist.destroy_process_group()
