"""build-nanogpt's logging: every rank opens the log file with "w" at start-up (which only
empties it, before any rank has written), and only rank 0 appends to it afterwards, after a
collective every rank reaches once its own file is open. No mistake.

    torchrun --nproc-per-node 2 log_opened_by_every_rank.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
master_process = rank == 0
log_dir = "log"
os.makedirs(log_dir, exist_ok=True)
log_file = os.path.join(log_dir, "log.txt")
with open(log_file, "w") as f:  # open for writing to clear the file
    pass

g = torch.Generator().manual_seed(0)
X = torch.randn(64, 6, generator=g)
dataset = TensorDataset(X, (X[:, 0] > 0).long())
sampler = DistributedSampler(dataset, seed=0)
loader = DataLoader(dataset, batch_size=8, sampler=sampler)
torch.manual_seed(0)
model = DDP(nn.Linear(6, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * world_size)
step = 0
for epoch in range(2):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        loss = loss.detach()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        if master_process:
            print(f"step {step}: loss {loss.item():.4f}")
            with open(log_file, "a") as f:
                f.write(f"{step} train {loss.item():.4f}\n")
        step += 1
dist.destroy_process_group()
