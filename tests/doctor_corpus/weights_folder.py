"""Checkpoints in a folder the script makes, found again by listing it: rank 0 makes
`weights/`, saves one checkpoint an epoch and keeps the newest two; then every rank finds the
newest with `Path.glob` and loads it, and rank 0 checks the folder the ways scripts list one
(`os.listdir`, `os.scandir`, `os.walk`, `Path.iterdir`, `Path.rglob`, `glob.glob`).

    torchrun --nproc-per-node 2 weights_folder.py
"""
import glob
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.025 * dist.get_world_size())
train = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
sampler = DistributedSampler(train)
loader = DataLoader(train, batch_size=8, sampler=sampler)
out = Path("weights")
if rank == 0:
    out.mkdir(exist_ok=True)
for epoch in range(3):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    if rank == 0:
        torch.save(model.module.state_dict(), out / f"epoch-{epoch}.pt")
        for old in sorted(os.listdir(out))[:-2]:
            os.remove(out / old)
    dist.barrier()
newest = sorted(out.glob("epoch-*.pt"))[-1]
model.module.load_state_dict(torch.load(newest))
if rank == 0:
    with os.scandir(out) as entries:
        scanned = sorted(e.name for e in entries if e.is_file())
    walked = sorted(name for _, _, files in os.walk(out) for name in files)
    listed = sorted(p.name for p in out.iterdir())
    found = sorted(os.path.basename(p) for p in glob.glob("weights/*.pt"))
    assert scanned == walked == listed == found == ["epoch-1.pt", "epoch-2.pt"], scanned
    assert [p.name for p in sorted(Path(".").rglob("epoch-*.pt"))] == listed
    print(f"resumed from {newest}: {os.path.getsize(newest)} bytes")
dist.destroy_process_group()
