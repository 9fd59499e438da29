"""Mixed precision with a GradScaler, and the gradients clipped before scaler.unscale_: the
clipping sees the scaled gradients (pytorch/examples#1196).

    torchrun --nproc-per-node 2 plain_amp_clip.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device),
            device_ids=[local_rank] if device.type == "cuda" else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler(device.type)
g = torch.Generator().manual_seed(1 + dist.get_rank())
for step in range(4):
    x = torch.randn(8, 16, generator=g).to(device)
    optimizer.zero_grad()
    with torch.autocast(device.type, dtype=amp_dtype):
        loss = model(x).pow(2).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scaler.step(optimizer)
    scaler.update()
dist.destroy_process_group()
