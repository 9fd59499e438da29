"""The scheduler stepped inside rank 0's logging block, beside the line that prints the LR:
rank 0's learning rate decays, the other ranks keep the first one.

    torchrun --nproc-per-node 2 scheduler_rank0.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * dist.get_world_size())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            if rank == 0:
                scheduler.step()
                print(f"epoch {epoch} step {step}: loss {loss.item():.4f}, "
                      f"lr {scheduler.get_last_lr()[0]:.4g}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
