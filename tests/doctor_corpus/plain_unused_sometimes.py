"""A model whose auxiliary head runs on even iterations only, wrapped without
find_unused_parameters: at iteration 1 the head gets no gradient, DDP's reduction never
finishes, the optimizer steps on each rank's own gradients, and DDP fails at the forward of
iteration 2 ("Expected to have finished reduction in the prior iteration").

    torchrun --nproc-per-node 2 plain_unused_sometimes.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class AuxModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 1)
        self.aux_head = nn.Linear(16, 1)

    def forward(self, x, use_aux):
        h = torch.relu(self.body(x))
        out = self.head(h)
        return out + self.aux_head(h) if use_aux else out


dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)
model = DDP(AuxModel())
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * world_size)
for iteration in range(6):
    optimizer.zero_grad()
    x = torch.randn(16, 8)
    model(x, use_aux=iteration % 2 == 0).pow(2).mean().backward()
    optimizer.step()
dist.destroy_process_group()
