"""A DistributedSampler seeded with the rank ("a different seed per process"): each rank
shuffles its own permutation and takes its slice of it, so the shards overlap and some samples
are not seen in an epoch. The sampler's seed must be the same on every rank.

    torchrun --nproc-per-node 2 sampler_seed_per_rank.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

seed = 42
dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
g = torch.Generator().manual_seed(0)
X = torch.randn(64, 6, generator=g)
dataset = TensorDataset(X, (X[:, 0] > 0).long())
sampler = DistributedSampler(dataset, shuffle=True, seed=seed + rank)
loader = DataLoader(dataset, batch_size=8, sampler=sampler)
torch.manual_seed(seed)
model = DDP(nn.Linear(6, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * world_size)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
dist.destroy_process_group()
