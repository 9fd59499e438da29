"""A blog post's DDP script, as its readers copy it: the rank written into the script
("rank = 0, this is normally set by the process launcher"), so every process claims rank 0,
and MASTER_PORT set by hand. Under torchrun every process passes rank 0 and the group never
forms; a one-epoch loop is added so that there is training to check once it is fixed.

    torchrun --nproc-per-node 2 blog_fixed_rank.py
"""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def init_process(rank, size, backend='nccl'):
    os.environ['MASTER_ADDR'] = 'localhost'
    os.environ['MASTER_PORT'] = '12355'
    dist.init_process_group(backend, rank=rank, world_size=size)


def cleanup():
    dist.destroy_process_group()


if __name__ == "__main__":
    size = 2  # or your actual number of processes
    rank = 0  # this is normally set by the process launcher

    init_process(rank, size, backend="gloo")

    local_batch_size = 32
    data = torch.randn(1000, 10)
    labels = torch.randint(0, 2, (1000,))
    dataset = TensorDataset(data, labels)
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=size,
                                                              rank=rank, shuffle=True)
    dataloader = DataLoader(dataset, batch_size=local_batch_size, sampler=sampler)
    model = DDP(torch.nn.Linear(10, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in dataloader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    cleanup()
