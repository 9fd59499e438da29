"""A OneCycleLR sized from each rank's loader, epochs=epochs and
steps_per_epoch=len(train_loader) (the DistributedSampler's shard: 4 batches on 2 ranks): the
3 epochs walk the whole cycle. Clean.

    torchrun --nproc-per-node 2 onecycle_loader_steps.py --epochs 3
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def get_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-lr", type=float, default=0.1)
    return parser.parse_args()


def main():
    args = get_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else "cpu"

    g = torch.Generator().manual_seed(0)
    X = torch.randn(64, 10, generator=g)
    dataset = TensorDataset(X, (X[:, 0] > 0).long())
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    train_loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
    model = DDP(model, device_ids=[local_rank] if torch.cuda.is_available() else None)
    max_lr = args.max_lr * dist.get_world_size()
    optimizer = torch.optim.SGD(model.parameters(), lr=max_lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr, epochs=args.epochs, steps_per_epoch=len(train_loader))

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for xb, yb in train_loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            scheduler.step()
        if dist.get_rank() == 0:
            print(f"epoch {epoch}: lr {scheduler.get_last_lr()[0]:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
