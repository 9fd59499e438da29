"""The tutorial's toy dataset, small: 20 features, one target (as pytorch/examples'
ddp-tutorial-series datautils.py, with a fixed generator so every rank builds the same)."""

import torch
from torch.utils.data import Dataset


class MyTrainDataset(Dataset):
    def __init__(self, size):
        self.size = size
        generator = torch.Generator().manual_seed(0)
        self.data = [(torch.rand(20, generator=generator), torch.rand(1, generator=generator))
                     for _ in range(size)]

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.data[index]
