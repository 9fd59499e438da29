"""nn.DataParallel under torchrun: DataParallel splits a batch over the GPUs of one process
and never talks to the other processes, so each rank trains its own model on its own shard.
Under torchrun the wrapper is DistributedDataParallel.

    torchrun --nproc-per-node 2 plain_data_parallel.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
world_size = dist.get_world_size()
g = torch.Generator().manual_seed(0)
X = torch.randn(64, 6, generator=g)
dataset = TensorDataset(X, (X[:, 0] > 0).long())
sampler = DistributedSampler(dataset, seed=0)
loader = DataLoader(dataset, batch_size=8, sampler=sampler)
torch.manual_seed(0)
model = nn.DataParallel(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * world_size)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
dist.destroy_process_group()
