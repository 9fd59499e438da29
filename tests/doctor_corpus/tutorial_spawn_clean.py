"""The PyTorch DDP tutorial's mp.spawn script (multigpu.py) as written, on CPU when there is
no GPU: rank 0 saves, set_epoch is called. Clean.

    python tutorial_spawn_clean.py 3 1
"""
import os

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from datautils import MyTrainDataset
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def ddp_setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo", rank=rank,
                       world_size=world_size)


class Trainer:
    def __init__(self, model, train_data, optimizer, gpu_id, save_every):
        self.gpu_id = gpu_id
        self.device = torch.device("cuda", gpu_id) if torch.cuda.is_available() else "cpu"
        self.model = DDP(model.to(self.device),
                         device_ids=[gpu_id] if torch.cuda.is_available() else None)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[GPU{self.gpu_id}] Epoch {epoch} | Batch size: {b_sz} | "
              f"Steps: {len(self.train_data)}")
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self._run_batch(source.to(self.device), targets.to(self.device))

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            if self.gpu_id == 0 and epoch % self.save_every == 0:
                torch.save(self.model.module.state_dict(), "checkpoint.pt")
                print(f"Epoch {epoch} | Training checkpoint saved at checkpoint.pt")


def main(rank, world_size, save_every, total_epochs, batch_size):
    ddp_setup(rank, world_size)
    dataset = MyTrainDataset(64)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    train_data = DataLoader(dataset, batch_size=batch_size, shuffle=False,
                            sampler=DistributedSampler(dataset))
    Trainer(model, train_data, optimizer, rank, save_every).train(total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("total_epochs", type=int)
    parser.add_argument("save_every", type=int)
    parser.add_argument("--batch_size", default=8, type=int)
    args = parser.parse_args()
    world_size = torch.cuda.device_count() or 2  # two CPU processes where there is no GPU
    mp.spawn(main, args=(world_size, args.save_every, args.total_epochs, args.batch_size),
             nprocs=world_size)
