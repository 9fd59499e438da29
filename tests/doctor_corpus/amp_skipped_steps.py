"""Mixed precision with a GradScaler, clean: the scaler skips the optimizer's step while the
scaled gradients overflow, then lowers its scale (``GradScaler.step`` calls
``optimizer.step()`` only when no gradient is inf or NaN). On a GPU in float16 the first steps
often overflow at the default scale of 65536; here the scale starts at 2 ** 20, so
the first steps are skipped on a CPU too. A skipped step is a step of the loop: the next
backward is not a second micro-step of it.

    torchrun --nproc-per-node 2 amp_skipped_steps.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 20)  # overflows float16 at first
data = TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=8, sampler=sampler)
skipped = 0
for epoch in range(2):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.mse_loss(model(x), y)
        scale = scaler.get_scale()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        skipped += scaler.get_scale() < scale  # the scale falls only after a skipped step
if dist.get_rank() == 0:
    print(f"steps skipped by the scaler: {skipped}")
dist.destroy_process_group()
