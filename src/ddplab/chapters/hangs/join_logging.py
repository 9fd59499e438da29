"""Logging the loss under ``Join``: the per-step ``all_reduce`` of the loss (the logged-loss
fix) and ``Join([ddp])`` (the uneven-inputs fix) break each other.

    python -m ddplab join-logging --fix none --json
    python -m ddplab join-logging --fix joinable --json

``Join([ddp])`` shadows the collectives of the joinables it was given, and only those: a rank
that has joined answers the other ranks' DDP all-reduces (``Join.__exit__`` runs
``_get_num_nonjoined_procs``, one all-reduce of one float, then each join hook's
``main_hook``, ``torch/distributed/algorithms/join.py``). A loss all-reduce that Join does not
know of, on a rank still training, pairs with one of those: the value it logs is wrong, and
the collectives after it no longer line up (gloo aborts the process, "Received data size
doesn't match expected size", ``gloo/transport/tcp/pair.cc``).

The fixes (``fix``):

- ``after-join``: log each rank's own loss; after the Join context, all-reduce the sum and the
  count once (:func:`train_epoch_mean_after_join`): the mean over every batch of the epoch.
- ``joinable``: make the logger a ``Joinable`` too (:class:`LossLog`), so that a joined rank
  answers its all-reduce with zeros: each step logs the mean over the ranks that took it.

Every rank trains the uneven chapter's MLP on its own data, the last rank ``extra_batches``
more batches (``uneven.rank_loader``).
"""

from __future__ import annotations

import dataclasses
import textwrap
import uuid

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.join import Join, Joinable, JoinHook
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.chapters.hangs import uneven
from ddplab.common.checks import an_int, int_in_range, one_of, positive_int
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.results import Result
from ddplab.engine import hang_watch

COMMAND = "join-logging"  # python -m ddplab join-logging

FIXES = ("none", "after-join", "joinable")


# ---------------------------------------------------------------- on every rank


def train_epoch_logging_each_step(ddp, optimizer, loader, log=print) -> None:
    """Join, and each step's loss averaged over the ranks: they break each
    other (the loss all-reduce pairs with Join's own)."""
    with Join([ddp]):
        for X, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(ddp(X), y)
            loss.backward()
            optimizer.step()
            total = loss.detach().clone()
            dist.all_reduce(total, group=ddp.process_group)
            log(total.item() / dist.get_world_size(ddp.process_group))


def train_epoch_mean_after_join(ddp, optimizer, loader, log=print) -> None:
    """Sum this rank's losses; all-reduce once, after Join: the epoch's mean."""
    # sum of losses, number of batches; on DDP's device, as NCCL all-reduces only GPU tensors
    total = torch.zeros(2, device=ddp.device)
    with Join([ddp]):
        for X, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(ddp(X), y)
            loss.backward()
            optimizer.step()
            total += torch.stack([loss.detach(), torch.ones((), device=loss.device)])
    dist.all_reduce(total, group=ddp.process_group)
    log((total[0] / total[1]).item())


class LossLog(Joinable):
    """Each step's loss averaged over the ranks that took it. A Joinable: once
    this rank has joined, its join hook answers the others' all-reduce."""

    def __init__(self, group, device, log=print):
        super().__init__()
        self.group, self.device, self.write = group, device, log

    def log(self, loss) -> None:
        Join.notify_join_context(self)
        total = torch.stack([loss.detach(), torch.ones((), device=loss.device)])  # loss, one rank
        dist.all_reduce(total, group=self.group)
        self.write((total[0] / total[1]).item())

    def join_hook(self, **kwargs) -> JoinHook:
        return _AddNothing(self.group, self.device)

    @property
    def join_device(self) -> torch.device:
        # Join all-reduces its count of ranks still training on this device (join.py)
        return self.device

    @property
    def join_process_group(self):
        return self.group


class _AddNothing(JoinHook):
    def __init__(self, group, device):
        self.group, self.device = group, device

    def main_hook(self) -> None:
        dist.all_reduce(torch.zeros(2, device=self.device), group=self.group)  # no loss, no rank


def train_epoch_logging_joinable(ddp, optimizer, loader, log=print) -> None:
    """Join knows of the logger: each step logs the mean over its ranks."""
    loss_log = LossLog(ddp.process_group, ddp.device, log)
    with Join([ddp, loss_log]):
        for X, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(ddp(X), y)
            loss.backward()
            optimizer.step()
            loss_log.log(loss)


TRAIN = {"none": train_epoch_logging_each_step, "after-join": train_epoch_mean_after_join,
         "joinable": train_epoch_logging_joinable}


def train(ctx, call_id: str, fix: str, batches_per_rank: list[int], batch_size: int,
          seed: int, check_in_seconds: float) -> dict:
    """Train under Join; note each step's own loss and the logged value."""
    work, watch = hang_watch.work_groups(check_in_seconds)
    model = make_model(uneven.LAYERS, seed).to(ctx.device)
    ddp = DDP(model, process_group=work)
    hang_watch.watch_ddp(call_id, ctx.rank, ddp)  # where it waits, while it hangs
    optimizer = torch.optim.SGD(model.parameters(), lr=uneven.LR)
    loader = uneven.rank_loader(ctx, batches_per_rank[ctx.rank], batch_size, seed,
                                drop_last=False)
    own, logged = [], []

    def before_step(optimizer, args, kwargs):
        # the loss this step trains on, recomputed without DDP (no collective)
        X, y = list(loader)[len(own)]
        with torch.no_grad():
            own.append(F.mse_loss(model(X), y).item())
        hang_watch.note(call_id, ctx.rank, step=len(own) - 1, own=own[-1])

    optimizer.register_step_pre_hook(before_step)

    def log(value: float) -> None:  # where the reader would print
        logged.append(value)
        hang_watch.note(call_id, ctx.rank, logged=value)

    TRAIN[fix](ddp, optimizer, loader, log)
    hang_watch.finish(call_id, ctx.rank, work, watch, check_in_seconds)
    return {"own": own, "logged": logged}  # the caller reads both from the notes


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class JoinLogging(Result):
    """What each rank logged under Join, against the loss of what each step trained on."""

    world_size: int
    fix: str
    batches_per_rank: list[int]
    own_losses: list[list[float]]  # per rank and step, from its log (also when it failed)
    logged: list[list[float]]  # per rank, what it logged (from its log, also when it failed)
    expected: list[float] | float  # one process: per step the mean over the ranks that took it
    error: str | None  # the RankError, when a rank failed

    json_extras = ("max_diff_logged",)

    @property
    def max_diff_logged(self) -> float | None:
        """Largest |logged - expected| over every rank (and step) that logged."""
        expected = self.expected
        if self.fix == "after-join":
            expected = [self.expected]
        diffs = [abs(v - expected[s]) for values in self.logged for s, v in enumerate(values)]
        return float(max(diffs)) if diffs else None

    def abort(self) -> str | None:
        """The error's first line and what the dead rank's log says of it, wrapped."""
        if not self.error:
            return None
        lines = self.error.splitlines()
        kept = [lines[0]] + [line.strip() for line in lines
                             if line.startswith("terminate called") or "what():" in line]
        return "\n".join(textwrap.fill(line, 78, subsequent_indent="  ") for line in kept)

    def describe(self) -> str:
        lines = [f"Join, logging {'each step' if self.fix != 'after-join' else 'once'} "
                 f"(fix {self.fix!r}), batches per rank {self.batches_per_rank}"]
        if self.fix == "after-join":
            lines.append(f"expected epoch mean: {self.expected:.4f}")
        else:
            lines.append("expected per step: " + ", ".join(f"{v:.4f}" for v in self.expected))
        for rank, values in enumerate(self.logged):
            lines.append(f"rank {rank} logged:      " + ", ".join(f"{v:.4f}" for v in values))
        if self.error:
            lines.append(textwrap.fill("error: " + self.error.splitlines()[0], 78))
        return "\n".join(lines)


def reference(world_size: int, counts: list[int], batch_size: int, seed: int) -> list[float]:
    """One process, Join's training: per step the mean loss of the ranks that took it."""
    model = make_model(uneven.LAYERS, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=uneven.LR)
    means = []
    for step in range(max(counts)):
        X, y = make_batch(uneven.LAYERS, batch_size, world_size, seed, step)
        optimizer.zero_grad()
        losses = [F.mse_loss(model(X[r * batch_size:(r + 1) * batch_size]),
                             y[r * batch_size:(r + 1) * batch_size])
                  for r in range(world_size) if step < counts[r]]
        means.append(float(sum(losses).item() / len(losses)))
        (sum(losses) / world_size).backward()  # Join divides by the initial world size
        optimizer.step()
    return means


def run(world_size: int = 2, fix: str = "none", batches: int = 2, extra_batches: int = 1,
        batch_size: int = 4, seed: int = 0, timeout: float = 10.0) -> JoinLogging:
    """Train under Join with the last rank holding ``extra_batches`` more, logging the loss."""
    one_of("fix", fix, FIXES)
    int_in_range("world_size", world_size, 2, 8)
    counts = uneven.batches_per_rank(world_size, batches, extra_batches)
    positive_int("batch_size", batch_size)
    an_int("seed", seed)
    call_id = uuid.uuid4().hex
    try:
        ddplab.run(train, world_size, timeout=timeout, call_id=call_id,
                   fix=fix, batches_per_rank=counts, batch_size=batch_size, seed=seed,
                   check_in_seconds=max(0.5, timeout / 2))
        error = None
    except ddplab.RankError as exc:
        error = str(exc)
    notes = hang_watch.read_notes(call_id, world_size)
    per_step = reference(world_size, counts, batch_size, seed)
    if fix == "after-join":
        expected = float(np.average(per_step, weights=[sum(s < c for c in counts)
                                                      for s in range(max(counts))]))
    else:
        expected = per_step
    return JoinLogging.from_ranks(
        ddplab.placement(),
        world_size=world_size, fix=fix, batches_per_rank=counts,
        own_losses=[[n["own"] for n in rank_notes if "own" in n] for rank_notes in notes],
        logged=[[n["logged"] for n in rank_notes if "logged" in n] for rank_notes in notes],
        expected=expected, error=error)


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--fix", choices=FIXES, default="none",
                        help="none: all-reduce the loss each step under Join (breaks); "
                             "after-join: once, after the Join context; joinable: the logger "
                             "joins too")
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--extra-batches", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
