"""A streamed dataset split between the ranks with itertools.islice(stream, rank, None,
world_size), the way IterableDataset examples shard a stream whose length is not known in
advance. The stream holds 67 batches: rank 0 gets 34, rank 1 gets 33, and at the end of the
epoch rank 0's 34th backward waits for a gradient all-reduce rank 1 never starts (a hang).

    torchrun --nproc-per-node 2 stream_islice_uneven.py
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
        stream = (self.read(i) for i in range(self.num_batches))
        return itertools.islice(stream, dist.get_rank(), None, dist.get_world_size())


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
