"""Which samples does each rank draw, at which step, in which epoch?

    python -m ddplab sharding --world-size 4 --dataset-size 10 --batch-size 2 --epochs 2 \\
        --shuffle --seed 0 --json
    torchrun --nproc-per-node 4 -m ddplab sharding --dataset-size 10 --batch-size 2 --json

Every rank builds a ``DataLoader`` over a ``DistributedSampler`` of a dataset whose samples are
their own indices, inside a real process group, and records every batch it is handed:
``indices[e][r][s]`` is what rank ``r`` received at step ``s`` of epoch ``e``. At each epoch the
ranks also all-reduce their batch sizes, which gives the number of samples one optimizer step
is computed from. ``--drop-last`` is the sampler's, ``--loader-drop-last`` the DataLoader's.
The command line shuffles only with ``--shuffle``; ``run()``, like the sampler, shuffles by
default.

What DistributedSampler does (``torch/utils/data/distributed.py``, torch 2.13): it shuffles
``range(N)`` with a generator seeded with ``seed + epoch`` (the epoch is whatever
``set_epoch`` last set, 0 if never called); pads the list by repeating its start until its
length divides by the world size, or with ``drop_last=True`` cuts its tail; and gives rank
``r`` every world-size-th element from position ``r``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

import ddplab
from ddplab.common.checks import a_bool, an_int, positive_int
from ddplab.common.results import Result

COMMAND = "sharding"  # python -m ddplab sharding

# Results travel through pipes and, from the CLI, as JSON: cap the number of indices drawn.
MAX_DRAWS = 1_000_000


class Indices(torch.utils.data.Dataset):
    """A dataset of ``n`` samples whose sample ``i`` is the number ``i``: what a rank is
    handed is the list of dataset indices it drew."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


# ---------------------------------------------------------------- on every rank


def sharded_loader(dataset, batch_size: int, shuffle: bool = True,
                   drop_last: bool = False, seed: int = 0,
                   loader_drop_last: bool = False) -> DataLoader:
    """This rank's DataLoader: a DistributedSampler hands the rank its
    share of ``dataset``. Before each epoch, call
    ``loader.sampler.set_epoch(epoch)``."""
    # No num_replicas, no rank: the sampler asks the process group.
    shard = DistributedSampler(dataset, shuffle=shuffle, seed=seed,
                               drop_last=drop_last)
    return DataLoader(dataset, batch_size=batch_size, sampler=shard,
                      drop_last=loader_drop_last)


def draws(ctx, dataset_size: int, batch_size: int, epochs: int,
          shuffle: bool, drop_last: bool, set_epoch: bool, seed: int,
          loader_drop_last: bool, sampler: bool) -> dict:
    """Every batch this rank's DataLoader yields, epoch by epoch, and
    the samples of each step on all ranks together.

    ``sampler=False`` does what a script without a DistributedSampler
    does: ``torch.manual_seed(seed)`` on every rank, a plain DataLoader.
    """
    dataset = Indices(dataset_size)
    if sampler:
        loader = sharded_loader(dataset, batch_size, shuffle, drop_last,
                                seed, loader_drop_last)
    else:
        torch.manual_seed(seed)
        loader = DataLoader(dataset, batch_size=batch_size,
                            shuffle=shuffle, drop_last=loader_drop_last)
    indices, global_sizes = [], []
    for epoch in range(epochs):
        if sampler and set_epoch:
            loader.sampler.set_epoch(epoch)
        batches = [batch.tolist() for batch in loader]
        sizes = torch.tensor([len(b) for b in batches],
                             device=ctx.device)
        dist.all_reduce(sizes)  # all ranks' samples, step by step
        indices.append(batches)
        global_sizes.append(sizes.tolist())
    return {"indices": indices, "global_batch_sizes": global_sizes,
            "samples_per_rank": len(loader.sampler),
            "steps_per_epoch": len(loader),
            # the world size and rank the sampler took from the group
            "sampler_view": ([loader.sampler.num_replicas, loader.sampler.rank] if sampler
                             else None)}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class Sharding(Result):
    """What every rank drew: ``indices[e][r][s]`` is rank r's batch at step s of epoch e."""

    dataset_size: int
    world_size: int
    batch_size: int
    epochs: int
    shuffle: bool
    drop_last: bool
    set_epoch: bool
    seed: int
    loader_drop_last: bool
    sampler: bool
    samples_per_rank: int  # len(sampler) on each rank (the dataset size without a sampler)
    steps_per_epoch: int  # len(loader)
    indices: list  # [epoch][rank][step] -> list of dataset indices
    global_batch_sizes: list  # [epoch][step] -> samples on all ranks together (all-reduced)

    @property
    def global_batch_size(self) -> int:
        """Samples per full step: ``batch_size x world_size``."""
        return self.batch_size * self.world_size

    def drawn(self, epoch: int) -> list[int]:
        """Every index drawn in ``epoch`` by all ranks, in rank order."""
        return [i for rank in self.indices[epoch] for batch in rank for i in batch]

    def times_drawn(self, epoch: int) -> np.ndarray:
        """How many times each dataset index was drawn in ``epoch``, over all ranks."""
        return np.bincount(self.drawn(epoch), minlength=self.dataset_size)

    def drawn_again(self, epoch: int) -> np.ndarray:
        """Whether each dataset index was drawn more than once in ``epoch`` (padding)."""
        return self.times_drawn(epoch) > 1

    def samples_per_epoch(self, epoch: int = 0) -> int:
        return len(self.drawn(epoch))

    def order(self, epoch: int) -> list[int]:
        """The sampler's list for ``epoch``, put back together from the ranks' draws: rank r's
        i-th sample sits at i*world_size + r (``indices[rank:total_size:num_replicas]``)."""
        ranks = [[i for batch in rank for i in batch] for rank in self.indices[epoch]]
        return [ranks[r][i] for i in range(self.samples_per_rank)
                for r in range(self.world_size)]

    def step_batch(self, epoch: int, step: int) -> list[int]:
        """The global batch of one step: every rank's batch at that step, sorted."""
        return sorted(i for rank in self.indices[epoch] for i in rank[step])

    def same_order_every_epoch(self) -> bool:
        return all(self.indices[e] == self.indices[0] for e in range(self.epochs))

    def json_fields(self) -> dict:
        return {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
                "global_batch_size": self.global_batch_size,
                "samples_per_epoch": [self.samples_per_epoch(e) for e in range(self.epochs)]}

    def describe(self) -> str:
        lines = [f"{self.dataset_size} samples, world size {self.world_size}, "
                 f"batch_size {self.batch_size} per rank",
                 f"per rank and epoch: {self.samples_per_rank} samples, "
                 f"{self.steps_per_epoch} steps"]
        for e in range(self.epochs):
            times = self.times_drawn(e)
            lines.append(f"epoch {e}: {self.samples_per_epoch(e)} drawn, "
                         f"{int((times > 1).sum())} more than once, "
                         f"{int((times == 0).sum())} never; "
                         f"per step {self.global_batch_sizes[e]}")
            for r, batches in enumerate(self.indices[e]):
                lines.append(f"  rank {r}: " + " ".join(map(str, batches)))
        return "\n".join(lines)


def expected_samples_per_rank(dataset_size: int, world_size: int, drop_last: bool) -> int:
    """``ceil(N / W)`` with padding; ``floor(N / W)`` when the sampler drops the tail."""
    if drop_last:
        return dataset_size // world_size
    return math.ceil(dataset_size / world_size)


def run(dataset_size: int = 10, world_size: int = 4, batch_size: int = 2, epochs: int = 2,
        shuffle: bool = True, drop_last: bool = False, set_epoch: bool = True, seed: int = 0,
        loader_drop_last: bool = False, sampler: bool = True, timeout: float = 60.0) -> Sharding:
    """Run the sampler and loader on ``world_size`` ranks and record every batch drawn.

    Allowed: any positive dataset size, world size (1 to 64), batch size and number of epochs,
    a batch larger than a rank's shard (one short batch), and a world size larger than the
    dataset (the sampler then repeats samples to give every rank one). Refused, with a
    ValueError: settings under which a rank would get no batch at all (``drop_last`` with fewer
    samples than ranks; ``loader_drop_last`` with a batch larger than a rank's shard), and more
    than ``MAX_DRAWS`` indices drawn in all.
    """
    _check(dataset_size, world_size, batch_size, epochs, seed, loader_drop_last,
           shuffle=shuffle, drop_last=drop_last, set_epoch=set_epoch, sampler=sampler)
    if sampler and drop_last and dataset_size < world_size:
        raise ValueError(f"drop_last=True with dataset_size {dataset_size} < world_size "
                         f"{world_size} leaves every rank without samples")
    per_rank = (expected_samples_per_rank(dataset_size, world_size, drop_last) if sampler
                else dataset_size)
    if loader_drop_last and batch_size > per_rank:
        raise ValueError(f"loader_drop_last=True with batch_size {batch_size} > "
                         f"{per_rank} samples per rank leaves every rank without a batch")
    if per_rank * world_size * epochs > MAX_DRAWS:
        raise ValueError(f"{per_rank * world_size * epochs} indices would be drawn; at most "
                         f"{MAX_DRAWS} (a smaller dataset_size or fewer epochs)")
    results = ddplab.run(draws, world_size, timeout=timeout,
                         dataset_size=dataset_size, batch_size=batch_size, epochs=epochs,
                         shuffle=shuffle, drop_last=drop_last, set_epoch=set_epoch, seed=seed,
                         loader_drop_last=loader_drop_last, sampler=sampler)
    if sampler and [r["sampler_view"] for r in results] != \
            [[len(results), r] for r in range(len(results))]:
        raise AssertionError("a sampler saw a world size or rank other than its group's")
    return Sharding.from_ranks(
        results,
        dataset_size=dataset_size, world_size=len(results), batch_size=batch_size,
        epochs=epochs, shuffle=shuffle, drop_last=drop_last, set_epoch=set_epoch, seed=seed,
        loader_drop_last=loader_drop_last, sampler=sampler,
        samples_per_rank=results[0]["samples_per_rank"],
        steps_per_epoch=results[0]["steps_per_epoch"],
        indices=[[r["indices"][e] for r in results] for e in range(epochs)],
        global_batch_sizes=results[0]["global_batch_sizes"])


def _check(dataset_size, world_size, batch_size, epochs, seed, loader_drop_last, **flags):
    for name, value in (("dataset_size", dataset_size), ("world_size", world_size),
                        ("batch_size", batch_size), ("epochs", epochs)):
        positive_int(name, value)
    an_int("seed", seed)
    for name, value in (*flags.items(), ("loader_drop_last", loader_drop_last)):
        a_bool(name, value)


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--dataset-size", type=int, default=10, help="samples in the dataset")
    parser.add_argument("--batch-size", type=int, default=2,
                        help="samples per rank per step (the DataLoader's batch_size)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--shuffle", action="store_true",
                        help="the sampler's shuffle (DistributedSampler's own default is on)")
    parser.add_argument("--drop-last", action="store_true",
                        help="the sampler's drop_last: cut the tail instead of padding")
    parser.add_argument("--no-set-epoch", dest="set_epoch", action="store_false",
                        help="never call sampler.set_epoch(epoch)")
    parser.add_argument("--loader-drop-last", action="store_true",
                        help="the DataLoader's drop_last: skip each rank's short last batch")
    parser.add_argument("--no-sampler", dest="sampler", action="store_false",
                        help="a plain DataLoader on every rank, no DistributedSampler")
    parser.add_argument("--seed", type=int, default=0, help="the sampler's seed")
