"""Five epochs, an evaluation each epoch, then the end every published script has: rank 0 saves
the model, every rank loads it back for a final check. The save is of the DDP wrapper, whose
keys start with 'module.', and the load is into the plain model: it fails at the very end,
after every step the doctor would once have stopped at.

    torchrun --nproc-per-node 2 tail_prefix_load.py
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
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
sampler = DistributedSampler(train)
loader = DataLoader(train, batch_size=8, sampler=sampler)
val_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=8)
for epoch in range(5):
    sampler.set_epoch(epoch)
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        val = sum(nn.functional.mse_loss(model(x), y).item() for x, y in val_loader)
    if rank == 0:
        print(f"epoch {epoch}: validation loss {val / len(val_loader):.4f}")
model.eval()
with torch.no_grad():  # the final pass over the training set, as many scripts make: whole
    seen = sum(len(x) for x, _ in loader)
assert seen == len(sampler), (seen, len(sampler))
if rank == 0:
    torch.save(model.state_dict(), "final.pt")
dist.barrier()
final = nn.Linear(4, 1)
final.load_state_dict(torch.load("final.pt"))
dist.destroy_process_group()
