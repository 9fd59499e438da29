"""The epoch's mean loss all-reduced with SUM and printed as it comes back: on 2 ranks the
printed loss is the sum of the ranks' means, twice what one process prints. Divide by the
world size (or reduce with AVG).

    torchrun --nproc-per-node 2 plain_logged_sum.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
g = torch.Generator().manual_seed(0)
X = torch.randn(64, 6, generator=g)
dataset = TensorDataset(X, (X[:, 0] > 0).long())
sampler = DistributedSampler(dataset, seed=0)
loader = DataLoader(dataset, batch_size=8, sampler=sampler)
torch.manual_seed(0)
model = DDP(nn.Linear(6, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * world_size)
for epoch in range(2):
    sampler.set_epoch(epoch)
    total = 0.0
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        total += loss.item()
    epoch_loss = torch.tensor(total / len(loader))
    dist.all_reduce(epoch_loss, op=dist.ReduceOp.SUM)
    if rank == 0:
        print(f"epoch {epoch}: loss {epoch_loss.item():.4f}")
dist.destroy_process_group()
