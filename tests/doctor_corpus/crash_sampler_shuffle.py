"""A DataLoader given both a DistributedSampler and shuffle=True, as a reader who adds the
sampler to a script that shuffled writes it: DataLoader refuses the pair.

    torchrun --nproc-per-node 2 crash_sampler_shuffle.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
model = DDP(nn.Linear(4, 1))
data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
loader = DataLoader(data, batch_size=8, shuffle=True, sampler=DistributedSampler(data))
for x, y in loader:
    nn.functional.mse_loss(model(x), y).backward()
dist.destroy_process_group()
