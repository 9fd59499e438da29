"""A complete DDP training script, as a reader would write one, that runs as it stands:

    torchrun --nproc-per-node 2 -m ddplab.chapters.averaging.train_ddp

torchrun starts the processes and sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, which
``init_process_group`` reads. gloo runs on CPU; on GPUs use "nccl" and move the model and each
batch to ``cuda:LOCAL_RANK``. The global batch is split among the ranks, so any world size
trains the same model as one process (the test runs 1 and 2 and compares).
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main(global_batch=32, epochs=5):
    dist.init_process_group("gloo")  # rank and world size come from torchrun
    torch.manual_seed(0)  # the same data and start weights on every rank
    X = torch.randn(1024, 8)
    y = X @ torch.randn(8, 1) + 0.1 * torch.randn(1024, 1)
    model = DDP(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(X, y)
    sampler = DistributedSampler(data)  # this rank's share of the samples
    loader = DataLoader(data, sampler=sampler,
                        batch_size=global_batch // dist.get_world_size())
    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # a new shuffle, the same on every rank
        for xb, yb in loader:
            optimizer.zero_grad()
            F.mse_loss(model(xb), yb).backward()  # DDP averages grads
            optimizer.step()
        if dist.get_rank() == 0:
            with torch.no_grad():
                loss = F.mse_loss(model.module(X), y).item()
            print(f"epoch {epoch}: loss on all samples {loss:.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
