"""SyncBatchNorm in the model, and a quick check on rank 0 alone through `model.module`, in
training mode: the module's SyncBatchNorm all-gathers its batch statistics there, a collective
the other ranks never join.

    torchrun --nproc-per-node 2 eval_rank0_sync_batchnorm.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    device = torch.device("cuda", local_rank)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
    model = DDP(nn.SyncBatchNorm.convert_sync_batchnorm(net).to(device),
                device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    probe = torch.randn(16, 8, device=device)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        if dist.get_rank() == 0:
            with torch.no_grad():
                print(f"epoch {epoch}: probe mean {model.module(probe).mean().item():.4f}")
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
