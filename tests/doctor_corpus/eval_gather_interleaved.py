"""Evaluation that gathers every rank's predictions and cuts them to the dataset's length, the
way Accelerate's gather_for_metrics does: the evaluation DistributedSampler pads 41 samples to
42 (sample 0 twice), and since rank r holds samples r, r + world_size, ..., interleaving the
ranks' predictions puts the padded copy last, where the cut drops it. No mistake.

    torchrun --nproc-per-node 2 eval_gather_interleaved.py
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
X = torch.randn(105, 6, generator=g)
y = (X[:, 0] > 0).long()
train_set, eval_set = TensorDataset(X[:64], y[:64]), TensorDataset(X[64:], y[64:])
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
    with torch.no_grad():
        predictions = torch.cat([model(xb).argmax(1) for xb, _ in eval_loader])
    dist.barrier()  # every rank has its predictions
    gathered = [torch.empty_like(predictions) for _ in range(world_size)]
    dist.all_gather(gathered, predictions)
    # sample i is on rank i % world_size: interleave, then drop the padding at the end
    predictions = torch.stack(gathered, dim=1).reshape(-1)[:len(eval_set)]
    accuracy = (predictions == eval_set.tensors[1]).float().mean().item()
    if rank == 0:
        print(f"epoch {epoch}: accuracy {accuracy:.3f} over {len(predictions)} samples")
dist.destroy_process_group()
