"""Batches drawn at random with torch.randint (no DataLoader, no sampler), after the same
torch.manual_seed on every rank: every rank draws the same indices, so the ranks train on the
same batch, and the global batch is one rank's 8 samples, not 16. Seed with the rank.

    torchrun --nproc-per-node 2 plain_randint_same_seed.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)  # the same on every rank
X = torch.randn(512, 6)  # the same data on every rank, as if read from a file
y = (X[:, 0] > 0).long()
model = DDP(nn.Linear(6, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(10):
    ix = torch.randint(len(X), (8,))
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(X[ix]), y[ix]).backward()
    optimizer.step()
dist.destroy_process_group()
