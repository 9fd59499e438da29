"""A checkpoint saved from the DDP wrapper (keys 'module.weight', ...) and loaded into the
plain model, as an evaluation script that builds the model without DDP does.

    torchrun --nproc-per-node 2 crash_module_prefix.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(nn.Linear(4, 1))
torch.manual_seed(1 + dist.get_rank())  # each rank its own batches
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    optimizer.step()
if dist.get_rank() == 0:
    torch.save(model.state_dict(), "model.pt")
dist.barrier()
evaluated = nn.Linear(4, 1)
evaluated.load_state_dict(torch.load("model.pt"))
dist.destroy_process_group()
