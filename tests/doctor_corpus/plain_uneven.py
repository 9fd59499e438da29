"""Each rank takes every world_size-th sample of 65 (no DistributedSampler): rank 0 gets 33
samples, 5 batches of 8, rank 1 gets 32, 4 batches. Rank 0's fifth backward waits for an
all-reduce rank 1 never starts.

    torchrun --nproc-per-node 2 plain_uneven.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
g = torch.Generator().manual_seed(0)
X = torch.randn(65, 8, generator=g)
y = X.sum(dim=1, keepdim=True)
shard = TensorDataset(X[rank::world_size], y[rank::world_size])
loader = DataLoader(shard, batch_size=8, shuffle=True)

torch.manual_seed(0)
model = DDP(nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * world_size)
for epoch in range(2):
    for xb, yb in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
dist.destroy_process_group()
