"""Six epochs, each ending with the epoch's last loss moved to the CPU for a log line: the
per-epoch code needs one batch (an epoch with none leaves `last_loss = 0`, an int, and
`last_loss.cpu()` fails). The end: rank 0 saves, every rank reads the number back.

    torchrun --nproc-per-node 2 epoch_last_loss.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.025 * dist.get_world_size())
train = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
sampler = DistributedSampler(train)
loader = DataLoader(train, batch_size=8, sampler=sampler)
history = []
for epoch in range(6):
    sampler.set_epoch(epoch)
    last_loss = 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        last_loss = loss.detach()
    history.append(last_loss.cpu().item())
    if rank == 0:
        print(f"epoch {epoch}: last loss {history[-1]:.4f}")
if rank == 0:
    torch.save({"history": history}, "history.pt")
dist.barrier()
assert len(torch.load("history.pt")["history"]) == 6
dist.destroy_process_group()
