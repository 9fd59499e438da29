"""A script that resumes: it loads checkpoint.pt if there is one, appends to train.log, keeps
metrics under runs/, and rank 0 saves over checkpoint.pt after every epoch, links latest.pt
to it, then reads it back to check it. Clean; run where checkpoint.pt and train.log already exist.

    torchrun --nproc-per-node 2 resume_checkpoint.py
"""
import os
import pathlib

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Linear(4, 1)
if os.path.exists("checkpoint.pt"):  # resume
    state = torch.load("checkpoint.pt")
    model.load_state_dict(state["model"])
    start = state["epoch"] + 1
else:
    start = 0
model = DDP(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=8, sampler=sampler)
os.makedirs("runs/exp1", exist_ok=True)
for epoch in range(start, start + 5):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    if rank == 0:
        with open("train.log", "a") as log:
            log.write(f"epoch {epoch}: loss {loss.item():.4f}\n")
        np.save("runs/exp1/loss.npy", np.array([loss.item()]))
        pathlib.Path("runs/exp1/last_epoch.txt").write_text(str(epoch))
        torch.save({"model": model.module.state_dict(), "epoch": epoch}, "checkpoint.pt")
        if os.path.lexists("latest.pt"):
            os.remove("latest.pt")
        os.symlink("checkpoint.pt", "latest.pt")
        saved = torch.load("latest.pt")  # what was just written, not what was there
        assert sorted(os.listdir("runs/exp1")) == ["last_epoch.txt", "loss.npy"]
        assert saved["epoch"] == epoch and torch.equal(saved["model"]["weight"],
                                                       model.module.weight.detach())
        assert open("train.log").read().endswith(f"epoch {epoch}: loss {loss.item():.4f}\n")
    dist.barrier()
dist.destroy_process_group()
