"""A manual training loop in the style of Hugging Face's example scripts (no Trainer, no
Accelerate): dict batches, `outputs.loss / gradient_accumulation_steps`, a step every
`gradient_accumulation_steps` batches, evaluation that sums correct predictions and counts.
Without `no_sync`, every micro-batch all-reduces its gradients: waste, not an error.

    torchrun --nproc-per-node 2 hf_loop.py --gradient_accumulation_steps 2
"""
import argparse
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
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
    parser.add_argument("--learning_rate", type=float, default=5e-3)
    parser.add_argument("--num_train_epochs", type=int, default=3)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    train_dataset = ToyClassificationDataset(64, seed=0)
    eval_dataset = ToyClassificationDataset(32, seed=1)
    train_dataloader = DataLoader(train_dataset, batch_size=args.per_device_train_batch_size,
                                  sampler=DistributedSampler(train_dataset))
    eval_dataloader = DataLoader(eval_dataset, batch_size=8,
                                 sampler=DistributedSampler(eval_dataset, shuffle=False))
    model = DDP(ToyModelForSequenceClassification())
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)

    completed_steps = 0
    for epoch in range(args.num_train_epochs):
        model.train()
        train_dataloader.sampler.set_epoch(epoch)
        for step, batch in enumerate(train_dataloader):
            outputs = model(**batch)
            loss = outputs.loss / args.gradient_accumulation_steps
            loss.backward()
            if (step + 1) % args.gradient_accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
                completed_steps += 1

        model.eval()
        correct = torch.zeros(2)
        for batch in eval_dataloader:
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            correct += torch.tensor([(predictions == batch["labels"]).sum().item(),
                                     len(predictions)])
        dist.all_reduce(correct)
        if dist.get_rank() == 0:
            print(f"epoch {epoch}: accuracy {correct[0].item() / correct[1].item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
