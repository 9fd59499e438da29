"""The epoch loss of the PyTorch transfer-learning tutorial's loop, running_loss /
len(loader.dataset), kept under DDP: each rank sums loss * batch size over its own shard (32
of the 64 samples on 2 ranks) and divides by all 64, so rank 0 prints about half its mean
loss, and a quarter on 4 ranks.

    torchrun --nproc-per-node 2 epoch_loss_dataset_len.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def train_one_epoch(model, loader, criterion, optimizer, device):
    model.train()
    running_loss = 0.0
    for inputs, labels in loader:
        inputs, labels = inputs.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = criterion(model(inputs), labels)
        loss.backward()
        optimizer.step()
        running_loss += loss.item() * inputs.size(0)
    return running_loss / len(loader.dataset)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(0)
    X = torch.randn(64, 12, generator=g)
    dataset = TensorDataset(X, (X[:, :3].sum(dim=1) > 0).long())
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
    model = DDP(model, device_ids=[local_rank] if torch.cuda.is_available() else None)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * dist.get_world_size(),
                                momentum=0.9)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        epoch_loss = train_one_epoch(model, loader, criterion, optimizer, device)
        if dist.get_rank() == 0:
            print(f"Epoch {epoch} train loss: {epoch_loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
