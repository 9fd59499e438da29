"""Uneven inputs: one rank has more batches than the others. Without care its extra backward
waits for an all-reduce the others never join, and the run hangs.

    python -m ddplab uneven --world-size 2 --extra-batches 1 --fix none --timeout 5 --json
    python -m ddplab uneven --world-size 2 --extra-batches 1 --fix loader-drop-last --json
    python -m ddplab uneven --world-size 2 --extra-batches 1 --fix min-count --json
    python -m ddplab uneven --world-size 2 --extra-batches 1 --fix join --json
    python -m ddplab uneven --world-size 2 --extra-batches 1 --timeout 4 --stacks

Every rank trains the same small MLP with SGD on its own hand-sharded data: ``batches`` full
batches of ``batch_size`` samples, the last rank ``extra_batches`` more, read through a
``DataLoader``. The fixes:

- ``loader-drop-last``: ``DataLoader(drop_last=True)``. It drops only a rank's last *partial*
  batch; full batches stay, so the counts stay unequal and the run still hangs. (A
  ``DistributedSampler`` gives every rank the same count already: without ``drop_last`` it pads
  by repeating indices, with it it cuts the tail, ``DistributedSampler.__iter__`` in
  ``torch/utils/data/distributed.py``. Uneven counts come from hand-sharded or iterable data.)
- ``min-count``: every rank all-reduces its number of batches with ``ReduceOp.MIN`` and takes
  that many (:func:`train_epoch_equal_count`); the extra batches are not trained on.
- ``join``: the loop runs inside ``torch.distributed.algorithms.Join([ddp])``. A rank that runs
  out joins; while others still train it shadows their collectives (DDP's join hook all-reduces
  zeros in place of its gradients, ``_DDPJoinHook.main_hook`` in
  ``torch/nn/parallel/distributed.py``), and at the end the last rank to join broadcasts its
  parameters to all. With ``divide_by_initial_world_size=True`` (the default) the gradient of a
  step that fewer ranks took is still divided by the initial world size; with False, by the
  number of ranks that took it. Join also adds two all-reduces to every forward
  (``Join.notify_join_context`` and ``_check_global_requires_backward_grad_sync``, both from
  ``DistributedDataParallel._pre_forward``; counted in ``join_cost``).

After the loop every rank checks in at a ``monitored_barrier`` (``hang_watch.finish``), which
names the ranks that never arrived. The rank function notes its process id, then each step
from an optimizer hook, so the loops the page shows (:func:`train_epoch`,
:func:`train_epoch_equal_count`) stay plain. With ``stacks=True`` every rank's Python stack is
dumped while the run hangs (``stack_dump``, py-spy).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

from ddplab.chapters.hangs import stack_dump
from ddplab.common.checks import an_int, int_in_range, one_of, positive_int
from ddplab.common.mlp import flat_grad, make_batch, make_model
from ddplab.common.results import Result
from ddplab.engine import hang_watch

COMMAND = "uneven"  # python -m ddplab uneven

FIXES = ("none", "loader-drop-last", "min-count", "join")
LAYERS = (8, 16, 1)
LR = 0.1
STACK_LINES = 6  # frames of each rank's stack that describe() prints


def batches_per_rank(world_size: int, batches: int, extra_batches: int) -> list[int]:
    """Full batches in each rank's data: ``batches``, the last rank ``extra_batches`` more."""
    int_in_range("world_size", world_size, 2, 64)
    positive_int("batches", batches)
    int_in_range("extra_batches", extra_batches, 0, 100)
    return [batches] * (world_size - 1) + [batches + extra_batches]


# ---------------------------------------------------------------- on every rank


def train_epoch(ddp, optimizer, loader) -> None:
    """One pass over this rank's loader. Hangs when another rank has fewer
    batches: this rank's extra backward waits in an all-reduce."""
    for X, y in loader:
        optimizer.zero_grad()
        F.mse_loss(ddp(X), y).backward()
        optimizer.step()


def train_epoch_equal_count(ddp, optimizer, loader) -> None:
    """Every rank takes as many batches as the rank with the fewest."""
    count = torch.tensor(len(loader), device=ddp.device)  # NCCL reduces tensors on its GPU
    dist.all_reduce(count, op=dist.ReduceOp.MIN, group=ddp.process_group)
    train_epoch(ddp, optimizer, itertools.islice(loader, int(count)))


def rank_loader(ctx, batches: int, batch_size: int, seed: int, drop_last: bool,
                layers=LAYERS) -> DataLoader:
    """This rank's rows of the first ``batches`` global batches, as a loader."""
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    parts = [make_batch(layers, batch_size, ctx.world_size, seed, step) for step in range(batches)]
    X = torch.cat([X[rows] for X, _ in parts]).to(ctx.device)
    y = torch.cat([y[rows] for _, y in parts]).to(ctx.device)
    return DataLoader(TensorDataset(X, y), batch_size=batch_size, drop_last=drop_last)


def train(ctx, call_id: str, batches_per_rank: list[int], fix: str,
          divide_by_initial_world_size: bool, batch_size: int, seed: int,
          check_in_seconds: float) -> dict:
    """Train on this rank's ``batches_per_rank[rank]`` batches; note each step in the log."""
    hang_watch.note(call_id, ctx.rank, pid=os.getpid())
    work, watch = hang_watch.work_groups(check_in_seconds)
    model = make_model(LAYERS, seed).to(ctx.device)
    ddp = DDP(model, process_group=work)  # keep a reference until backward is done
    hang_watch.watch_ddp(call_id, ctx.rank, ddp)  # where it waits, while it hangs
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loader = rank_loader(ctx, batches_per_rank[ctx.rank], batch_size, seed,
                         drop_last=fix == "loader-drop-last")
    batches = list(loader)
    scales = []  # per step: this rank's DDP gradient over its local one

    def before_step(optimizer, args, kwargs):
        """The same step without DDP, from the parameters the step starts from."""
        X, y = batches[len(scales)]
        local = copy.deepcopy(model)
        local.zero_grad(set_to_none=True)
        F.mse_loss(local(X), y).backward()
        scales.append(_scale(flat_grad(model), flat_grad(local)))

    def after_step(optimizer, args, kwargs):
        hang_watch.note(call_id, ctx.rank, step=len(scales) - 1)

    optimizer.register_step_pre_hook(before_step)
    optimizer.register_step_post_hook(after_step)
    if fix == "min-count":
        train_epoch_equal_count(ddp, optimizer, loader)
    else:
        with Join([ddp], enable=fix == "join",
                  divide_by_initial_world_size=divide_by_initial_world_size):
            train_epoch(ddp, optimizer, loader)
    hang_watch.finish(call_id, ctx.rank, work, watch, check_in_seconds)
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    return {"steps": len(scales), "grad": flat_grad(model), "scales": scales,
            "params": params}


def _scale(ddp_grad: torch.Tensor, local_grad: torch.Tensor) -> float:
    """Least-squares factor s with ddp_grad ~ s * local_grad."""
    return float(ddp_grad @ local_grad / (local_grad @ local_grad))


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class Uneven(Result):
    """How a run with one rank holding extra batches ended, and what each rank did."""

    world_size: int
    fix: str
    divide_by_initial_world_size: bool
    timeout: float
    outcome: str  # "finished" or "hung"
    seconds: float
    batches_per_rank: list[int]
    steps_completed_per_rank: list[int]  # from each rank's log, also when it hung
    missing_ranks: list[int]  # as monitored_barrier named them
    check_in_messages: list[str | None]  # each rank's monitored_barrier message, if it failed
    final_grads: np.ndarray | None  # (world_size, n): each rank's gradient at the end
    final_params: np.ndarray | None  # (world_size, n): each rank's parameters at the end
    gradient_scales: list[list[float]] | None  # per rank and step: DDP's gradient / local one
    error: str | None
    stacks: list[list[str] | None] | None = None  # per rank, its frames while hung (py-spy)

    json_extras = ("extra_step_scale",)

    @property
    def extra_step_scale(self) -> float | None:
        """On the last rank's extra steps, its DDP gradient over its own local gradient."""
        if self.gradient_scales is None:
            return None
        extra = self.gradient_scales[-1][min(len(g) for g in self.gradient_scales):]
        return float(np.mean(extra)) if extra else None

    def summary(self) -> str:
        lines = [f"fix {self.fix!r}, world size {self.world_size}: {self.outcome} after "
                 f"{self.seconds:.1f} s\n  (timeout {self.timeout:g} s)",
                 f"batches per rank: {self.batches_per_rank}; steps completed per rank: "
                 f"{self.steps_completed_per_rank}"]
        lines += hang_watch.message_lines(self.check_in_messages, self.missing_ranks)
        if self.extra_step_scale is not None:
            lines.append(f"extra steps: DDP's gradient = {self.extra_step_scale:.3f} x the "
                         f"rank's own\n  (divide_by_initial_world_size="
                         f"{self.divide_by_initial_world_size})")
        return "\n".join(lines)

    def stack_text(self) -> str:
        """Each rank's innermost frames while it hung (``stacks=True``)."""
        lines = []
        for rank, frames in enumerate(self.stacks or []):
            lines.append(f"rank {rank}'s stack while hung, innermost first (py-spy dump):")
            lines += [f"  {frame}" for frame in (frames or ["(not dumped)"])[:STACK_LINES]]
        return "\n".join(lines)

    def describe(self) -> str:
        return "\n".join(filter(None, [self.summary(), self.stack_text()]))


def run(world_size: int = 2, extra_batches: int = 1, fix: str = "none", batches: int = 2,
        divide_by_initial_world_size: bool = True, batch_size: int = 4, seed: int = 0,
        timeout: float = 60.0, stacks: bool = False) -> Uneven:
    """Train with the last rank holding ``extra_batches`` more; "hung" if it never finishes.
    ``stacks``: dump every rank's stack once each has done the steps it can (py-spy)."""
    one_of("fix", fix, FIXES)
    per_rank = batches_per_rank(world_size, batches, extra_batches)
    positive_int("batch_size", batch_size)
    an_int("seed", seed)
    during = stack_dump.when_stuck([min(per_rank)] * world_size) if stacks else None
    watched = hang_watch.run_watched(
        train, world_size, timeout, during=during,
        batches_per_rank=per_rank, fix=fix,
        divide_by_initial_world_size=bool(divide_by_initial_world_size),
        batch_size=batch_size, seed=seed, check_in_seconds=max(0.5, timeout / 2))
    results = watched.results
    return Uneven.from_ranks(
        watched,
        world_size=world_size, fix=fix,
        divide_by_initial_world_size=bool(divide_by_initial_world_size), timeout=timeout,
        outcome=watched.outcome, seconds=watched.seconds, batches_per_rank=per_rank,
        steps_completed_per_rank=watched.steps_completed_per_rank,
        missing_ranks=hang_watch.missing_ranks(watched.check_in_messages),
        check_in_messages=watched.check_in_messages,
        final_grads=None if results is None else np.stack([r["grad"] for r in results]),
        final_params=None if results is None else np.stack([r["params"] for r in results]),
        gradient_scales=None if results is None else [r["scales"] for r in results],
        error=watched.error, stacks=watched.during)


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--extra-batches", type=int, default=1,
                        help="batches the last rank has beyond the others (default 1)")
    parser.add_argument("--fix", choices=FIXES, default="none",
                        help="loader-drop-last: DataLoader(drop_last=True), still hangs; "
                             "min-count: all-reduce MIN of the batch counts; join: Join([ddp])")
    parser.add_argument("--batches", type=int, default=2, help="batches of every other rank")
    parser.add_argument("--divide-by-active-ranks", dest="divide_by_initial_world_size",
                        action="store_false",
                        help="with --fix join: Join(divide_by_initial_world_size=False)")
    parser.add_argument("--batch-size", type=int, default=4, help="samples per rank and batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stacks", action="store_true",
                        help="dump every rank's Python stack while it hangs (needs py-spy)")
