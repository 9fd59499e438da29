"""A complete DDP training script, as a reader would write one, that runs as it stands:

    torchrun --nproc-per-node 2 -m ddplab.chapters.averaging.train_ddp

torchrun starts the processes and sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, which
``init_process_group`` reads, and LOCAL_RANK and LOCAL_WORLD_SIZE. With a GPU for every process
of the node the script runs NCCL, each process on ``cuda:LOCAL_RANK`` (NCCL refuses two ranks on
one GPU, NVIDIA/nccl#418); otherwise gloo on CPU. The model and each batch go to that device
once, as in nanoGPT's ``train.py``; the rest does not change. The global batch is split among
the ranks, so any world size trains the same model as one process (the test runs 1 and 2 and
compares).
"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main(global_batch=32, epochs=5):
    local_rank = int(os.environ["LOCAL_RANK"])  # from torchrun, as are rank and world size
    on_gpus = torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"])
    device = torch.device("cuda", local_rank) if on_gpus else torch.device("cpu")
    if on_gpus:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if on_gpus else "gloo")
    torch.manual_seed(0)  # the same data and start weights on every rank
    X = torch.randn(1024, 8)
    y = X @ torch.randn(8, 1) + 0.1 * torch.randn(1024, 1)
    model = DDP(torch.nn.Linear(8, 1).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(X, y)
    sampler = DistributedSampler(data)  # this rank's share of the samples
    loader = DataLoader(data, sampler=sampler,
                        batch_size=global_batch // dist.get_world_size())
    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # a new shuffle, the same on every rank
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            F.mse_loss(model(xb), yb).backward()  # DDP averages grads
            optimizer.step()
        if dist.get_rank() == 0:
            with torch.no_grad():
                loss = F.mse_loss(model.module(X.to(device)), y.to(device)).item()
            print(f"epoch {epoch}: loss on all samples {loss:.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
