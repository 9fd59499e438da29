"""The fixed script, printing each step's loss averaged over the ranks, and divided by the world
size once more by mistake: every line it prints is half the loss one process prints.

    torchrun --nproc-per-node 2 train_logged.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
local_rank = int(os.environ["LOCAL_RANK"])  # this process's GPU on its own node
device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
if device.type == "cuda":
    torch.cuda.set_device(device)

g = torch.Generator().manual_seed(0)
X = torch.randn(105, 10, generator=g)
y = (X[:, 0] + 0.5 * X[:, 1] > 0).long()
train_set, val_set = TensorDataset(X[:64], y[:64]), TensorDataset(X[64:], y[64:])
sampler = DistributedSampler(train_set, shuffle=True)
train_loader = DataLoader(train_set, batch_size=8, sampler=sampler)
val_loader = DataLoader(Subset(val_set, range(rank, len(val_set), world_size)), batch_size=8)

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * world_size, momentum=0.9)

for epoch in range(3):
    model.train()
    sampler.set_epoch(epoch)  # a new order each epoch
    for xb, yb in train_loader:
        xb, yb = xb.to(device), yb.to(device)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged, op=dist.ReduceOp.AVG)  # the mean over the ranks
        logged /= world_size  # divided a second time
        if rank == 0:
            print(f"epoch {epoch}: loss {logged.item():.4f}")
    model.eval()
    counts = torch.zeros(2, device=device)  # correct predictions, samples
    with torch.no_grad():
        for xb, yb in val_loader:
            xb, yb = xb.to(device), yb.to(device)
            correct = (model(xb).argmax(1) == yb).sum()
            counts += torch.stack([correct, torch.tensor(len(yb), device=device)])
    dist.all_reduce(counts)  # sums and counts, then one division
    if rank == 0:
        print(f"epoch {epoch}: val accuracy {counts[0].item() / counts[1].item():.3f}")
        torch.save(model.module.state_dict(), "model.pt")  # one writer
    dist.barrier()  # the others wait until the file is complete
dist.destroy_process_group()
