"""Randomness under DDP: which random draws must differ between ranks, and which torch seeds
for you.

The model's initial weights need not match across ranks: DDP's constructor broadcasts rank 0's
parameters and buffers (``_sync_module_states`` in ``torch/nn/parallel/distributed.py``). Data
augmentation is the opposite: each rank augments its own images, and with the same seed on
every rank the augmentations are the same on every rank, on different images.

``DataLoader`` workers: each time an iterator is made (each epoch), the main process draws
``base_seed`` from torch's default generator (``_BaseDataLoaderIter.__init__``,
``torch/utils/data/dataloader.py``); worker ``i`` seeds ``random`` and torch with
``base_seed + i`` and NumPy with a state derived from both (``_worker_loop`` and
``_generate_state``, ``torch/utils/data/_utils/worker.py``). So workers draw different numbers
from each other, but with the same ``torch.manual_seed`` on every rank, worker ``i`` of every
rank draws the same ones. Seed with ``seed + rank``.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

import ddplab
from ddplab.common.checks import an_int, int_in_range, one_of
from ddplab.common.results import Result

SEEDINGS = ("same", "seed+rank")


class RandomCrops(Dataset):
    """Each item: a random crop offset from torch, ``random`` and NumPy, as an augmentation
    would draw them."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return (int(torch.randint(0, 1000, ())), random.randrange(1000),
                int(np.random.randint(1000)))


def seed_everything(seed: int, rank: int) -> None:
    """What to copy: ``seed + rank`` for everything a rank draws on its own."""
    torch.manual_seed(seed + rank)
    random.seed(seed + rank)
    np.random.seed(seed + rank)


# ---------------------------------------------------------------- on every rank


def draws(ctx, seeding: str, seed: int, samples: int) -> dict:
    """The crops this rank's loop draws in its own process."""
    # "same": every rank seeds as rank 0 does, as a script with one seed does
    seed_everything(seed, ctx.rank if seeding == "seed+rank" else 0)
    return {"main": [list(RandomCrops(samples)[i]) for i in range(samples)]}


def worker_draws(rank: int, seeding: str, seed: int, samples: int, workers: int) -> list:
    """The crops DataLoader workers draw after ``rank`` seeded as ``seeding`` says. Run in the
    caller: the pool's rank processes are daemons, which may not start worker processes. The
    caller's random states are put back afterwards."""
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()
    try:
        seed_everything(seed, rank if seeding == "seed+rank" else 0)
        loader = DataLoader(RandomCrops(samples), batch_size=None, num_workers=workers)
        return [[int(v) for v in item] for item in loader]
    finally:
        torch.set_rng_state(states[0])
        random.setstate(states[1])
        np.random.set_state(states[2])


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class Seeds(Result):
    world_size: int
    seeding: str
    workers: int
    main_per_rank: list  # per rank: per sample (torch, random, numpy)
    workers_per_rank: list  # DataLoader workers, run in the caller with each rank's seeds

    @property
    def main_same_on_every_rank(self) -> bool:
        return all(m == self.main_per_rank[0] for m in self.main_per_rank)

    @property
    def workers_same_on_every_rank(self) -> bool:
        return all(w == self.workers_per_rank[0] for w in self.workers_per_rank)

    def describe(self) -> str:
        lines = [f"seeding {self.seeding!r}, {self.workers} DataLoader workers per rank"]
        for rank, (m, w) in enumerate(zip(self.main_per_rank, self.workers_per_rank)):
            lines.append(f"rank {rank}: main {[x[0] for x in m]}, workers {[x[0] for x in w]}")
        lines.append(f"same crops on every rank: main process {self.main_same_on_every_rank}, "
                     f"workers {self.workers_same_on_every_rank}")
        return "\n".join(lines)


def run(world_size: int = 2, seeding: str = "same", seed: int = 0, samples: int = 4,
        workers: int = 2, timeout: float = 60.0) -> Seeds:
    int_in_range("world_size", world_size, 1, 64)
    one_of("seeding", seeding, SEEDINGS)
    an_int("seed", seed)
    int_in_range("samples", samples, 1, 64)
    int_in_range("workers", workers, 0, 4)
    results = ddplab.run(draws, world_size, timeout=timeout, seeding=seeding,
                         seed=seed, samples=samples)
    return Seeds.from_ranks(results, world_size=world_size, seeding=seeding, workers=workers,
                            main_per_rank=[r["main"] for r in results],
                            workers_per_rank=[worker_draws(rank, seeding, seed, samples, workers)
                                              for rank in range(world_size)])
