"""The device named by the index torch.cuda gives, as scripts that call
`torch.device(torch.cuda.current_device())` do: set_device first, then every tensor and the
model on that GPU. Clean.

    torchrun --nproc-per-node 2 device_from_index.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    device = torch.device(torch.cuda.current_device())
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 1).to(device), device_ids=[device])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        total = torch.zeros(2, device=device)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            total += torch.stack([loss.detach() * len(x), torch.tensor(len(x), device=device)])
        dist.all_reduce(total)
        if dist.get_rank() == 0:
            print(f"epoch {epoch}: loss {(total[0] / total[1]).item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
