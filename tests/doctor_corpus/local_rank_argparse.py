"""The torch.distributed.launch way: --local_rank from argparse, distributed only when it is
given. torchrun gives no --local_rank (it sets LOCAL_RANK), so under torchrun every process
trains alone on the whole dataset.

    torchrun --nproc-per-node 2 local_rank_argparse.py
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()
if args.local_rank != -1:
    dist.init_process_group("gloo")
model = nn.Linear(4, 1)
if args.local_rank != -1:
    model = nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    optimizer.step()
