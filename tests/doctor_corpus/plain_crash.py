"""A script with a bug of its own, nothing to do with DDP: the target's shape is wrong.

    torchrun --nproc-per-node 2 plain_crash.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = DDP(nn.Linear(8, 2))
x, y = torch.randn(16, 8), torch.randint(0, 2, (15,))
loss = nn.functional.cross_entropy(model(x), y)
dist.destroy_process_group()
