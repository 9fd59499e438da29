"""A clean DDP training script that times its own optimizer steps (for benchmarks/doctor.py):
rank 0 writes the median step time, in seconds, to the file named by its first argument.

    torchrun --nproc-per-node 2 doctor_clean_script.py steps.json --steps 60
"""
import argparse
import json
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--width", type=int, default=256)
args = parser.parse_args()

dist.init_process_group("gloo")
world_size = dist.get_world_size()
g = torch.Generator().manual_seed(0)
X = torch.randn(4096, 64, generator=g)
y = X[:, :1].clone()
sampler = DistributedSampler(TensorDataset(X, y), seed=0)
loader = DataLoader(TensorDataset(X, y), batch_size=32, sampler=sampler)
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(64, args.width), nn.ReLU(), nn.Linear(args.width, args.width),
                          nn.ReLU(), nn.Linear(args.width, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * world_size)
times, epoch = [], 0
while len(times) < args.steps:
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        start = time.perf_counter()
        optimizer.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
        if len(times) == args.steps:
            break
    epoch += 1
if dist.get_rank() == 0:
    with open(args.out, "w") as f:
        kept = sorted(times[5:])  # the first steps build DDP's buckets
        json.dump({"median_step_s": kept[len(kept) // 2], "mean_step_s": sum(kept) / len(kept),
                   "params": sum(p.numel() for p in model.parameters())}, f)
dist.destroy_process_group()
