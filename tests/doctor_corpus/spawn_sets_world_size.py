"""A script run with plain python that sets its own rendezvous variables and starts its ranks
with mp.spawn, as many tutorials do; each rank joins with env:// and reads WORLD_SIZE back from
the environment. Correct.

    python spawn_sets_world_size.py
"""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank):
    dist.init_process_group("gloo", rank=rank)  # WORLD_SIZE from the environment
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(8, 4, generator=g)).pow(2).mean().backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29517"
    os.environ["WORLD_SIZE"] = "2"
    mp.spawn(train, nprocs=2)
