"""A tokenizer's vocabulary built and saved by every rank (the script was written for one
process), then read back by rank 0 to report its size: rank 0 may read the file while rank 1
is rewriting it (json.JSONDecodeError on an empty or half-written file, now and then).

    torchrun --nproc-per-node 2 vocab_every_rank.py
"""
import json
from collections import Counter

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

TEXTS = ["the cat sat on the mat", "a dog ate the bone", "the bird sang at dawn"] * 20


def build_vocab(texts):
    counts = Counter(word for text in texts for word in text.split())
    return {word: i for i, (word, _) in enumerate(counts.most_common())}


dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
vocab = build_vocab(TEXTS)
with open("vocab.json", "w") as f:
    json.dump(vocab, f)
if rank == 0:
    with open("vocab.json") as f:
        print(f"vocabulary of {len(json.load(f))} words saved")
ids = torch.tensor([[vocab[w] for w in t.split()[:4]] for t in TEXTS])
data = TensorDataset(ids, ids[:, 0] % 2)
sampler = DistributedSampler(data, seed=0)
loader = DataLoader(data, batch_size=6, sampler=sampler)
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.EmbeddingBag(len(vocab), 8), nn.Linear(8, 2)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * world_size)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
dist.destroy_process_group()
