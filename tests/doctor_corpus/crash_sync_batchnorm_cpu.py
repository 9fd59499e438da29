"""SyncBatchNorm in a model kept on the CPU with gloo, as a reader without GPUs writes it after
reading that BatchNorm differs between ranks: DDP refuses it.

    torchrun --nproc-per-node 2 crash_sync_batchnorm_cpu.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
model = DDP(nn.SyncBatchNorm.convert_sync_batchnorm(model).to("cpu"))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    optimizer.step()
dist.destroy_process_group()
