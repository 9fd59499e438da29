"""The twin of custom_sampler_epoch.py: a sampler of the script's own, written as
DistributedSampler's stand-in (a shuffle from a seed, each rank taking every world_size-th
index), whose __iter__ seeds its generator with the seed and the epoch set_epoch stored: a new
order each epoch. Clean.

    torchrun --nproc-per-node 2 custom_sampler_epoch_clean.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Sampler, TensorDataset


class ShardSampler(Sampler):
    def __init__(self, dataset, seed=0):
        self.dataset, self.seed, self.epoch = dataset, seed, 0
        self.rank, self.num_replicas = dist.get_rank(), dist.get_world_size()

    def __iter__(self):
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        order = torch.randperm(len(self.dataset), generator=g).tolist()
        return iter(order[self.rank::self.num_replicas])

    def __len__(self):
        return len(range(self.rank, len(self.dataset), self.num_replicas))

    def set_epoch(self, epoch):
        self.epoch = epoch


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    sampler = ShardSampler(data, seed=42)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
