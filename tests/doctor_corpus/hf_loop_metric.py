"""A Hugging Face-style loop whose evaluation averages each rank's accuracy over the ranks
(pytorch/examples#905): the validation set is sharded without padding, so the shards differ
in size and the mean of the ranks' accuracies is not the accuracy. Training uses no_sync.

    torchrun --nproc-per-node 2 hf_loop_metric.py
"""
import argparse
import contextlib
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, Subset
from torch.utils.data.distributed import DistributedSampler


class ToyClassificationDataset(Dataset):
    def __init__(self, size, seed):
        g = torch.Generator().manual_seed(seed)
        self.input_ids = torch.randint(0, 50, (size, 8), generator=g)
        self.labels = (self.input_ids.sum(dim=1) % 2).long()

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.input_ids[i], "labels": self.labels[i]}


class ToyModelForSequenceClassification(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = nn.EmbeddingBag(50, 16)
        self.classifier = nn.Linear(16, 2)

    def forward(self, input_ids, labels=None):
        logits = self.classifier(self.embeddings(input_ids))
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return SimpleNamespace(loss=loss, logits=logits)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--per_device_train_batch_size", type=int, default=8)
    parser.add_argument("--gradient_accumulation_steps", type=int, default=2)
    parser.add_argument("--num_train_epochs", type=int, default=2)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # set_seed, as the examples call it: the same model on every run
    train_dataset = ToyClassificationDataset(64, seed=0)
    eval_dataset = ToyClassificationDataset(41, seed=1)
    train_dataloader = DataLoader(train_dataset, batch_size=args.per_device_train_batch_size,
                                  sampler=DistributedSampler(train_dataset))
    # every sample once: rank r takes r, r + world_size, ...
    eval_shard = Subset(eval_dataset, range(rank, len(eval_dataset), world_size))
    eval_dataloader = DataLoader(eval_shard, batch_size=8)
    model = DDP(ToyModelForSequenceClassification())
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3 * world_size)

    for epoch in range(args.num_train_epochs):
        model.train()
        train_dataloader.sampler.set_epoch(epoch)
        for step, batch in enumerate(train_dataloader):
            last = (step + 1) % args.gradient_accumulation_steps == 0
            with contextlib.nullcontext() if last else model.no_sync():
                outputs = model(**batch)
                loss = outputs.loss / args.gradient_accumulation_steps
                loss.backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()

        model.eval()
        correct, total = 0, 0
        for batch in eval_dataloader:
            with torch.no_grad():
                predictions = model(**batch).logits.argmax(dim=-1)
            correct += (predictions == batch["labels"]).sum().item()
            total += len(predictions)
        accuracy = torch.tensor(correct / total)
        dist.all_reduce(accuracy, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"epoch {epoch}: eval accuracy {accuracy.item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
