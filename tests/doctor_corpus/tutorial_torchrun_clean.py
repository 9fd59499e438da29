"""The PyTorch DDP tutorial's torchrun script with the sampler's set_epoch added: clean.

    torchrun --nproc-per-node 2 tutorial_torchrun_clean.py 3 1
"""
import os

import torch
import torch.nn.functional as F
from datautils import MyTrainDataset
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every):
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.device = torch.device("cuda", self.gpu_id) if torch.cuda.is_available() else "cpu"
        self.model = DDP(model.to(self.device),
                         device_ids=[self.gpu_id] if torch.cuda.is_available() else None)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self._run_batch(source.to(self.device), targets.to(self.device))

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            if self.gpu_id == 0 and epoch % self.save_every == 0:
                torch.save(self.model.module.state_dict(), "checkpoint.pt")


def main(save_every, total_epochs, batch_size):
    init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    dataset = MyTrainDataset(64)
    model = torch.nn.Linear(20, 1)
    # the global batch grows with the world size, and so does the learning rate
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3 * int(os.environ["WORLD_SIZE"]))
    train_data = DataLoader(dataset, batch_size=batch_size, shuffle=False,
                            sampler=DistributedSampler(dataset))
    Trainer(model, train_data, optimizer, save_every).train(total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("total_epochs", type=int)
    parser.add_argument("save_every", type=int)
    parser.add_argument("--batch_size", default=8, type=int)
    args = parser.parse_args()
    main(args.save_every, args.total_epochs, args.batch_size)
