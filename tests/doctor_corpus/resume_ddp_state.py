"""The PyTorch DDP tutorial's checkpoint (pytorch/examples distributed/ddp/example.py): rank 0
saves the DDP model's state_dict, every rank waits, then loads it back into its DDP model with
map_location. The keys start with 'module.' on both sides, so the load works: clean.

    torchrun --nproc-per-node 2 resume_ddp_state.py
"""
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
ddp_model = DDP(nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 5)))
optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.001)
CHECKPOINT_PATH = os.path.join(tempfile.gettempdir(), "model.checkpoint")
if rank == 0:
    torch.save(ddp_model.state_dict(), CHECKPOINT_PATH)
dist.barrier()
ddp_model.load_state_dict(torch.load(CHECKPOINT_PATH, map_location="cpu"))
g = torch.Generator().manual_seed(rank)
for step in range(4):
    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10, generator=g))
    nn.functional.mse_loss(outputs, torch.randn(20, 5, generator=g)).backward()
    optimizer.step()
dist.barrier()
if rank == 0:
    os.remove(CHECKPOINT_PATH)
dist.destroy_process_group()
