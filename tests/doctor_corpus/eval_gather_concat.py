"""Evaluation that gathers every rank's predictions, concatenates them rank by rank and cuts
them to the dataset's length. The evaluation DistributedSampler pads 40 samples over 3 ranks to
42 (rank 1 and rank 2 each end with a repeated sample); concatenating rank by rank leaves
rank 1's repeat in the middle, and the cut drops rank 2's repeat and the real sample before it:
the accuracy counts sample 0 twice and never sees sample 38.

    torchrun --nproc-per-node 3 eval_gather_concat.py
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
X = torch.randn(136, 6, generator=g)
y = (X[:, 0] > 0).long()
train_set, eval_set = TensorDataset(X[:96], y[:96]), TensorDataset(X[96:], y[96:])
train_sampler = DistributedSampler(train_set, seed=0)
train_loader = DataLoader(train_set, batch_size=8, sampler=train_sampler)
eval_loader = DataLoader(eval_set, batch_size=8, sampler=DistributedSampler(eval_set,
                                                                            shuffle=False))

torch.manual_seed(0)
model = DDP(nn.Linear(6, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * world_size)
for epoch in range(2):
    train_sampler.set_epoch(epoch)
    for xb, yb in train_loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
    predictions, labels = [], []
    with torch.no_grad():
        for xb, yb in eval_loader:
            predictions.append(model(xb).argmax(1))
            labels.append(yb)
    predictions, labels = torch.cat(predictions), torch.cat(labels)
    all_predictions = [torch.empty_like(predictions) for _ in range(world_size)]
    all_labels = [torch.empty_like(labels) for _ in range(world_size)]
    dist.all_gather(all_predictions, predictions)
    dist.all_gather(all_labels, labels)
    # drop the padding
    predictions = torch.cat(all_predictions)[:len(eval_set)]
    labels = torch.cat(all_labels)[:len(eval_set)]
    accuracy = (predictions == labels).float().mean().item()
    if rank == 0:
        print(f"epoch {epoch}: accuracy {accuracy:.3f} over {len(predictions)} samples")
dist.destroy_process_group()
