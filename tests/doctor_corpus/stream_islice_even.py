"""A streamed dataset split between the ranks with itertools.islice, each rank
taking every world_size-th batch up to the largest multiple of world_size: of the 67 batches
each rank gets 33 and the last is left out, so every rank's epoch ends at the same step. Clean.

    torchrun --nproc-per-node 2 stream_islice_even.py
"""
import itertools
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset


class BatchStream(IterableDataset):
    """Pre-batched samples as they arrive from a stream (here: made from their index)."""

    def __init__(self, num_batches, batch_size=8):
        self.num_batches, self.batch_size = num_batches, batch_size

    def read(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(self.batch_size, 16, generator=g)
        return x, x.sum(dim=1, keepdim=True)

    def __iter__(self):
        world_size = dist.get_world_size()
        usable = self.num_batches // world_size * world_size  # the same count on every rank
        stream = (self.read(i) for i in range(self.num_batches))
        return itertools.islice(stream, dist.get_rank(), usable, world_size)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else "cpu"
    loader = DataLoader(BatchStream(67), batch_size=None)

    torch.manual_seed(0)
    model = DDP(nn.Linear(16, 1).to(device),
                device_ids=[local_rank] if torch.cuda.is_available() else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
    for epoch in range(2):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
