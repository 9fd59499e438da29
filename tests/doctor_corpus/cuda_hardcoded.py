"""A script written for GPUs and nothing else, as most published DDP scripts are: mp.spawn with
one process per GPU, backend="nccl", set_device, .to(rank), device_ids=[rank], pin_memory,
SyncBatchNorm, autocast("cuda") with a GradScaler, CUDA events for timing, and the loss for
logging all-reduced on the GPU. Clean.

    python cuda_hardcoded.py
"""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12356"
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    torch.backends.cudnn.benchmark = True
    torch.cuda.manual_seed_all(0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model).cuda()
    model = DDP(model, device_ids=[rank], output_device=rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.cuda.amp.GradScaler()
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler, pin_memory=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        start.record()
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.to(f"cuda:{rank}")
            optimizer.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        end.record()
        torch.cuda.synchronize()
        logged = loss.detach().clone()
        dist.all_reduce(logged)
        if rank == 0:
            print(f"epoch {epoch}: loss {logged.item() / world_size:.4f}, "
                  f"{start.elapsed_time(end):.1f} ms, "
                  f"{torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = torch.cuda.device_count()
    mp.spawn(main, args=(world_size,), nprocs=world_size)
