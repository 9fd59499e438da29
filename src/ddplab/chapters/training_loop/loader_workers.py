"""DataLoader workers under DDP: every rank starts its own.

    python -m ddplab loader-workers --world-size 2 --num-workers 2 --persistent-workers --json

Each rank builds its own ``DataLoader`` over its ``DistributedSampler``, and each makes
``num_workers`` worker processes: ``world_size x num_workers`` in all, beside the ranks, so
``num_workers`` is per rank (on a machine of ``C`` cores and ``G`` GPUs, about ``C / G`` at
most). The workers only load: the order of the samples is the sampler's, drawn in the rank
(``seed + epoch``), and the loader hands batches back in that order for any ``num_workers``.
Without ``persistent_workers`` the workers are started again for every epoch (every ``iter``);
with it, the same processes serve every epoch. Worker ``i`` seeds torch with ``base_seed + i``,
``base_seed`` drawn from its rank's generator (``_worker_loop``,
``torch/utils/data/_utils/worker.py``): seeded ``seed + rank``, the ranks' workers draw different
numbers (the section on seeds). ``pin_memory`` puts batches in page-locked host memory, from
which a copy to a GPU can run beside the computation; it is on here where the rank's device is
a GPU, and off on CPU ranks, which have nothing to copy to.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import multiprocessing
import os
import textwrap

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, get_worker_info

import ddplab
from ddplab.common.checks import a_bool, an_int, int_in_range, positive_int
from ddplab.common.results import Result

COMMAND = "loader-workers"  # python -m ddplab loader-workers

# Workers forked from the rank, as a torchrun rank on Linux forks them (fork is Python's default
# start method there before 3.14). The pool's ranks come from a forkserver, whose method they
# inherit: each worker would start through a new forkserver that imports torch again (15 s
# for 2 ranks x 2 workers on this 2-core machine under load, against 0.4 s forked).
FORK = "fork" if "fork" in multiprocessing.get_all_start_methods() else None


class WhoLoaded(Dataset):
    """Sample ``i`` is ``(i, the loading process's id, its torch seed)``."""

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i):
        info = get_worker_info()  # None in the rank itself (num_workers=0)
        return i, os.getpid(), info.seed if info is not None else torch.initial_seed()


@contextlib.contextmanager
def workers_allowed():
    """The pool's ranks are daemon processes, and multiprocessing refuses children to a daemon
    (``BaseProcess.start``, Python's multiprocessing/process.py); a rank under torchrun is not
    one. DataLoader workers are daemons that end with their parent
    (``ManagerWatchdog``, torch/utils/data/_utils/worker.py), so a rank may start them."""
    config = multiprocessing.current_process()._config
    daemon = config.get("daemon")
    config["daemon"] = False
    try:
        yield
    finally:
        config["daemon"] = daemon


def epochs(ctx, dataset_size: int, batch_size: int, num_workers: int,
           persistent_workers: bool, num_epochs: int, seed: int) -> dict:
    """This rank's DataLoader for ``num_epochs`` epochs: per epoch the samples in the order
    they came, and which process loaded them with which seed."""
    torch.manual_seed(seed + ctx.rank)  # each rank its own stream, so its workers' seeds differ
    dataset = WhoLoaded(dataset_size)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler,
                        num_workers=num_workers, persistent_workers=persistent_workers,
                        pin_memory=ctx.device.type == "cuda",
                        multiprocessing_context=FORK if num_workers else None)
    out = []
    with workers_allowed():
        for epoch in range(num_epochs):
            sampler.set_epoch(epoch)  # a new order each epoch
            order, loaded_by = [], {}
            for indices, pids, seeds in loader:
                order += indices.tolist()
                loaded_by.update(zip(pids.tolist(), seeds.tolist()))
            out.append({"order": order, "loaded_by": sorted(loaded_by.items())})
        del loader  # persistent workers end with their loader's iterator
        gc.collect()
    return {"rank_pid": os.getpid(), "epochs": out}


@dataclasses.dataclass
class LoaderWorkers(Result):
    """Per rank and epoch: the samples in the order the loader gave them, and the
    ``(process id, torch seed)`` of every process that loaded some."""

    world_size: int
    num_workers: int
    persistent_workers: bool
    rank_pids: list
    ranks: list  # per rank, per epoch: {"order": [...], "loaded_by": [(pid, seed), ...]}

    json_extras = ("worker_processes", "same_workers_every_epoch", "worker_seeds_differ")

    def loaders(self, epoch: int) -> set:
        """The processes that loaded samples in ``epoch``, over all ranks."""
        return {pid for r in self.ranks for pid, _ in r[epoch]["loaded_by"]}

    @property
    def worker_processes(self) -> int:
        """Processes other than the ranks that loaded samples in the first epoch."""
        return len(self.loaders(0) - set(self.rank_pids))

    @property
    def same_workers_every_epoch(self) -> bool:
        return all(self.loaders(e) == self.loaders(0) for e in range(len(self.ranks[0])))

    @property
    def worker_seeds_differ(self) -> bool:
        """No torch seed of a worker of one rank is a seed of a worker of another."""
        seeds = [{s for _, s in r[0]["loaded_by"]} for r in self.ranks]
        return sum(map(len, seeds)) == len(set().union(*seeds))

    def orders(self, epoch: int) -> list:
        return [r[epoch]["order"] for r in self.ranks]

    def describe(self) -> str:
        epochs = len(self.ranks[0])
        return "\n".join([
            f"{self.world_size} ranks x num_workers={self.num_workers}: "
            f"{self.worker_processes} worker processes beside the ranks",
            f"persistent_workers={self.persistent_workers}: the same workers in all {epochs} "
            f"epochs: {self.same_workers_every_epoch}",
            f"workers' torch seeds all differ across ranks: {self.worker_seeds_differ}",
            f"rank 0's samples, epoch 0: {self.orders(0)[0]}"])


def run(world_size: int = 2, num_workers: int = 2, persistent_workers: bool = False,
        dataset_size: int = 16, batch_size: int = 2, num_epochs: int = 2, seed: int = 0,
        timeout: float = 60.0) -> LoaderWorkers:
    """Read ``dataset_size`` samples on ``world_size`` ranks for ``num_epochs`` epochs."""
    int_in_range("world_size", world_size, 1, ddplab.MAX_WORLD_SIZE)
    int_in_range("num_workers", num_workers, 0, 8)
    a_bool("persistent_workers", persistent_workers)
    if persistent_workers and num_workers == 0:
        raise ValueError("persistent_workers needs num_workers > 0 (DataLoader refuses it)")
    for name, value in (("dataset_size", dataset_size), ("batch_size", batch_size),
                        ("num_epochs", num_epochs)):
        positive_int(name, value)
    an_int("seed", seed)
    ranks = ddplab.run(epochs, world_size, timeout=timeout,
                       dataset_size=dataset_size, batch_size=batch_size,
                       num_workers=num_workers, persistent_workers=persistent_workers,
                       num_epochs=num_epochs, seed=seed)
    return LoaderWorkers.from_ranks(ranks, world_size=world_size, num_workers=num_workers,
                                    persistent_workers=persistent_workers,
                                    rank_pids=[r["rank_pid"] for r in ranks],
                                    ranks=[r["epochs"] for r in ranks])


@dataclasses.dataclass
class Orders(Result):
    """The samples each rank read, in order, per epoch, for several ``num_workers``."""

    world_size: int
    num_workers: list
    orders: list  # per num_workers: per rank, per epoch, the samples in the order read

    @property
    def same(self) -> bool:
        """Whether every ``num_workers`` gave every rank the same samples in the same order."""
        return all(o == self.orders[0] for o in self.orders)

    def describe(self) -> str:
        return textwrap.fill(f"{self.world_size} ranks, num_workers {self.num_workers}: each "
                             f"rank read the same samples in the same order, epoch by epoch, "
                             f"whatever num_workers: {self.same}", 78, subsequent_indent="  ")


def orders(world_size: int = 2, num_workers=(0, 1, 3), **params) -> Orders:
    """:func:`run` for each of ``num_workers``; the order each rank read its samples in."""
    runs = [run(world_size, n, **params) for n in num_workers]
    return Orders.from_ranks(runs, world_size=world_size, num_workers=list(num_workers),
                             orders=[[r.orders(e) for e in range(len(r.ranks[0]))] for r in runs])


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--num-workers", type=int, default=2, help="DataLoader workers per rank")
    parser.add_argument("--persistent-workers", action="store_true")
    parser.add_argument("--dataset-size", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=2, help="samples per rank per batch")
    parser.add_argument("--num-epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
