"""A small MNIST-style script (skj092/pytorch-ddp-example's shape): rank 0 saves the DDP model's
state_dict at the end, and nothing in the script loads it. Its keys are DDP's, each starting
with 'module.': the model without DDP cannot load it as it is (state-dict-prefix, advice).

    torchrun --nproc-per-node 2 save_module_prefix.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
data = TensorDataset(torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,)))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=16, sampler=sampler)
ddp_model = DDP(Net())
optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.01 * world_size)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        F.cross_entropy(ddp_model(x), y).backward()
        optimizer.step()
if rank == 0:
    torch.save(ddp_model.state_dict(), "mnist_ddp.pt")
dist.destroy_process_group()
