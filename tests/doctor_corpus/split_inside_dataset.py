"""A Dataset class that makes its own train/validation split with random_split and no
generator, as scripts that keep their data handling in one class do: every rank builds it, and
each rank's split differs, so the DistributedSampler shards a different training set on each.

    torchrun --nproc-per-node 2 split_inside_dataset.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, TensorDataset, random_split
from torch.utils.data.distributed import DistributedSampler


class SplitData(Dataset):
    def __init__(self, split="train"):
        g = torch.Generator().manual_seed(0)  # the file on disk: the same on every rank
        X = torch.randn(100, 6, generator=g)
        full = TensorDataset(X, (X[:, 0] > 0).long())
        train, val = random_split(full, [0.8, 0.2])
        self.samples = train if split == "train" else val

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        return self.samples[i]


dist.init_process_group("gloo")
world_size = dist.get_world_size()
train_set = SplitData("train")
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
