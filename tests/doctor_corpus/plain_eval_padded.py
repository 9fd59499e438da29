"""Validation through a DistributedSampler: 45 samples over 2 ranks are padded to 46, so one
sample is counted twice in the accuracy (the sums and counts are reduced correctly).

    torchrun --nproc-per-node 2 plain_eval_padded.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
world_size = dist.get_world_size()
g = torch.Generator().manual_seed(0)
X = torch.randn(109, 6, generator=g)
y = (X[:, 0] > 0).long()
train_set, val_set = TensorDataset(X[:64], y[:64]), TensorDataset(X[64:], y[64:])
train_sampler = DistributedSampler(train_set)
train_loader = DataLoader(train_set, batch_size=8, sampler=train_sampler)
val_loader = DataLoader(val_set, batch_size=8, sampler=DistributedSampler(val_set, shuffle=False))

torch.manual_seed(0)
model = DDP(nn.Linear(6, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * world_size)
for epoch in range(2):
    train_sampler.set_epoch(epoch)
    for xb, yb in train_loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
    correct = torch.zeros(2)
    with torch.no_grad():
        for xb, yb in val_loader:
            correct += torch.tensor([(model(xb).argmax(1) == yb).sum().item(), len(yb)])
    dist.all_reduce(correct)
    if dist.get_rank() == 0:
        print(f"epoch {epoch}: accuracy {correct[0].item() / correct[1].item():.3f} "
              f"over {int(correct[1].item())} predictions")
dist.destroy_process_group()
