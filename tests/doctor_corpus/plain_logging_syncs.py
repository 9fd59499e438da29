"""A training loop that logs every step the careful way: a barrier "so the ranks stay
together", then three all-reduces (the loss, the accuracy, the sample count). The numbers are
right; the barrier adds a collective each step (and on NCCL makes the host wait for the GPU),
where DDP's backward already keeps the ranks in step.

    torchrun --nproc-per-node 2 plain_logging_syncs.py
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
    for step, (xb, yb) in enumerate(loader):
        optimizer.zero_grad()
        logits = model(xb)
        loss = nn.functional.cross_entropy(logits, yb)
        loss.backward()
        dist.barrier()
        loss_sum = loss.detach() * len(yb)
        correct = (logits.argmax(1) == yb).sum().float()
        count = torch.tensor(float(len(yb)))
        for value in (loss_sum, correct, count):
            dist.all_reduce(value)
        optimizer.step()
        if rank == 0:
            print(f"epoch {epoch} step {step}: loss {(loss_sum / count).item():.4f} "
                  f"accuracy {(correct / count).item():.3f}")
dist.destroy_process_group()
