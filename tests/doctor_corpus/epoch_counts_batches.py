"""A script that checks each epoch went through its whole loader: correct on its own, it fails
once an epoch is cut short, as the doctor cuts the epochs after its steps.

    torchrun --nproc-per-node 2 epoch_counts_batches.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.025 * dist.get_world_size())
train = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
sampler = DistributedSampler(train)
loader = DataLoader(train, batch_size=8, sampler=sampler)
for epoch in range(3):
    sampler.set_epoch(epoch)
    losses = []
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert len(losses) == len(loader), f"epoch {epoch}: {len(losses)} of {len(loader)} batches"
dist.destroy_process_group()
