"""A model with an auxiliary head that the loss never uses, wrapped without
find_unused_parameters: DDP waits for the head's gradients and fails at the second forward.

Every rank draws its random batch after the same torch.manual_seed(0): the ranks train on
the same batch (same-batches).

    torchrun --nproc-per-node 2 plain_unused_param.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 1)
        self.aux_head = nn.Linear(16, 4)  # for a second task, not trained yet

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


dist.init_process_group("gloo")
world_size = dist.get_world_size()
torch.manual_seed(0)
model = DDP(TwoHeads())
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * world_size)
for step in range(4):
    optimizer.zero_grad()
    model(torch.randn(16, 8)).pow(2).mean().backward()
    optimizer.step()
dist.destroy_process_group()
