"""find_unused_parameters=True on a model whose parameters all get gradients: DDP searches
the graph after every forward for nothing (waste, not an error).

Every rank draws its random batches after the same torch.manual_seed(0): the ranks train on
the same batches (same-batches).

    torchrun --nproc-per-node 2 plain_find_unused_true.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
world_size = dist.get_world_size()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)),
            find_unused_parameters=True)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * world_size)
for step in range(4):
    optimizer.zero_grad()
    model(torch.randn(16, 8)).pow(2).mean().backward()
    optimizer.step()
dist.destroy_process_group()
