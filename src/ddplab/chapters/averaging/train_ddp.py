"""A whole DDP training run, as it runs on a cluster, with nothing of ddplab:

    torchrun --nproc-per-node 2 -m ddplab.chapters.averaging.train_ddp

torchrun starts one process per GPU (here, without GPUs, per CPU rank) and
sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT``, which ``init_process_group`` reads. Rank 0 prints the trained
weight and bias as JSON.
"""

import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def make_dataset(n: int = 256) -> TensorDataset:
    g = torch.Generator().manual_seed(0)  # the same dataset on every rank
    X = torch.randn(n, 3, generator=g)
    return TensorDataset(X, X @ torch.tensor([[1.0], [-2.0], [0.5]]))


def train(num_epochs=3, batch_size=8, lr=0.05) -> torch.nn.Module:
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)  # else every rank also allocates on GPU 0
    dataset = make_dataset()
    sampler = DistributedSampler(dataset, seed=0)  # one shard per rank
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    torch.manual_seed(0)  # DDP also broadcasts rank 0's weights at construction
    model = torch.nn.Linear(3, 1).to(device)
    model = DDP(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(num_epochs):
        sampler.set_epoch(epoch)  # else every epoch repeats epoch 0's order
        for X, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(X.to(device)), y.to(device))
            loss.backward()  # DDP all-reduces here: a mean over the ranks
            optimizer.step()
    return model.module


if __name__ == "__main__":
    model = train()
    if dist.get_rank() == 0:
        print(json.dumps({"weight": model.weight.tolist(),
                          "bias": model.bias.tolist()}))
    dist.destroy_process_group()
