"""hf_device_gather.py with one line more: the epoch's counts, made with `torch.tensor` on the
CPU, are all-reduced as well, which NCCL refuses (the gathers are on the GPU and are fine).

    torchrun --nproc-per-node 2 hf_device_gather_cpu_count.py
"""
import os
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class ToyDataset(Dataset):
    def __init__(self, size, seed):
        g = torch.Generator().manual_seed(seed)
        self.input_ids = torch.randint(0, 50, (size, 8), generator=g)
        self.labels = (self.input_ids.sum(dim=1) % 2).long()

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.input_ids[i], "labels": self.labels[i]}


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = nn.EmbeddingBag(50, 16)
        self.classifier = nn.Linear(16, 2)

    def forward(self, input_ids, labels=None):
        logits = self.classifier(self.embeddings(input_ids))
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return SimpleNamespace(loss=loss, logits=logits)


def main():
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend)
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = dist.get_world_size()
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    train_dataset, eval_dataset = ToyDataset(64, seed=0), ToyDataset(32, seed=1)
    train_sampler = DistributedSampler(train_dataset, shuffle=True, seed=42)
    train_dataloader = DataLoader(train_dataset, batch_size=8, sampler=train_sampler)
    eval_dataloader = DataLoader(eval_dataset, batch_size=8,
                                 sampler=DistributedSampler(eval_dataset, shuffle=False))
    torch.manual_seed(0)
    model = ToyModel().to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3 * world_size)

    for epoch in range(2):
        model.train()
        train_sampler.set_epoch(epoch)
        for batch in train_dataloader:
            batch = {k: v.to(device) for k, v in batch.items()}
            outputs = model(**batch)
            outputs.loss.backward()
            optimizer.step()
            optimizer.zero_grad()

        model.eval()
        correct = seen = 0
        for batch in eval_dataloader:
            batch = {k: v.to(device) for k, v in batch.items()}
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            all_predictions = [torch.zeros_like(predictions) for _ in range(world_size)]
            all_labels = [torch.zeros_like(batch["labels"]) for _ in range(world_size)]
            dist.all_gather(all_predictions, predictions)
            dist.all_gather(all_labels, batch["labels"])
            predictions, labels = torch.cat(all_predictions), torch.cat(all_labels)
            correct += (predictions == labels).sum().item()
            seen += len(labels)
        totals = torch.tensor([correct, seen])
        dist.all_reduce(totals)
        if dist.get_rank() == 0:
            print(f"epoch {epoch}: accuracy {correct / seen:.3f} over {seen} samples")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
