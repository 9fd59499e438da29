"""Every tensor and the model sent to "cuda", with torch.cuda.set_device never called: each
process's "cuda" is GPU 0, so every rank of the node is on the same GPU. The twin of
device_from_index.py.

    torchrun --nproc-per-node 2 cuda_no_set_device.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("nccl")
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 1).to("cuda"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to("cuda"), y.to("cuda")
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        logged = loss.detach()
        dist.all_reduce(logged)
        if dist.get_rank() == 0:
            print(f"epoch {epoch}: loss {logged.item() / dist.get_world_size():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
