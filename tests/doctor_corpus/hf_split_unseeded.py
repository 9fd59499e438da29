"""A train/validation split made on every rank without a seed (scikit-learn's
train_test_split without random_state, here torch.randperm): each rank splits differently, so
the DistributedSampler takes its shard of a different training set on each rank, and samples
of one rank's validation set are in another rank's training set. Split once, with a seed.

    torchrun --nproc-per-node 2 hf_split_unseeded.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def train_test_split(dataset, test_size):
    order = torch.randperm(len(dataset)).tolist()  # no generator: a different split per process
    cut = int(len(dataset) * (1 - test_size))
    return Subset(dataset, order[:cut]), Subset(dataset, order[cut:])


dist.init_process_group("gloo")
world_size = dist.get_world_size()
g = torch.Generator().manual_seed(0)
X = torch.randn(100, 6, generator=g)
dataset = TensorDataset(X, (X[:, 0] > 0).long())  # read from disk: the same on every rank
train_set, val_set = train_test_split(dataset, test_size=0.2)
sampler = DistributedSampler(train_set, seed=0)
loader = DataLoader(train_set, batch_size=8, sampler=sampler)
model = DDP(nn.Linear(6, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * world_size)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
dist.destroy_process_group()
