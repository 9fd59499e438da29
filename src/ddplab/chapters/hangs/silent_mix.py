"""The silent mix: with uneven inputs, the next collective of the rank that ran out pairs with
the other rank's dangling gradient all-reduce, and when the sizes agree nothing complains.

    python -m ddplab silent-mix --timeout 3 --json
    python -m ddplab silent-mix --mode detail --metric-size 6 --timeout 3 --json

Two ranks train ``Linear(4, 1)`` (5 parameters, one bucket of 5 floats) on their own data,
rank 0 two batches, rank 1 three. Then every rank counts its predictions in ``metric_size``
bins and all-reduces the counts (:func:`train_then_count`). Rank 0's count all-reduce is its
next collective, and it pairs with rank 1's third gradient all-reduce: with 5 bins the sizes
agree, so rank 1 steps with rank 0's counts in its gradient, rank 0's counts come back with
half of rank 1's gradient in them, and neither sees an error. Rank 1 then waits in its own
count all-reduce, which nobody joins: the hang that ``monitored_barrier`` names.

``mode``:

- ``ddp``: as above, through DDP.
- ``detail``: the same run with ``TORCH_DISTRIBUTED_DEBUG=DETAIL``'s checks on the group
  (``dist.set_debug_level(DebugLevel.DETAIL)`` before ``new_group`` wraps the gloo group in a
  ``ProcessGroupWrapper``, ``_new_process_group_helper`` in
  ``torch/distributed/distributed_c10d.py``). Before each collective the wrapper compares the
  ranks' fingerprints: sequence number, op, tensor shapes, dtypes, devices. The gradient
  all-reduce is written out (:class:`OneBucket`, DDP's one all-reduce of the whole bucket),
  since DDP itself crashes on a wrapped group in this torch (``detail-ddp``).
- ``detail-ddp``: DDP built on the DETAIL-wrapped group. torch 2.13.0+cpu dies with SIGSEGV in
  ``Logger.set_construction_data_and_log`` (``_ddp_init_helper``,
  ``torch/nn/parallel/distributed.py``); also with ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` set in
  the environment for the default group.
"""

from __future__ import annotations

import copy
import dataclasses
import textwrap

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.constants import default_pg_timeout
from torch.nn.parallel import DistributedDataParallel as DDP

from ddplab.chapters.hangs import uneven
from ddplab.common.checks import an_int, int_in_range, one_of
from ddplab.common.mlp import flat_grad, make_model
from ddplab.common.results import Result
from ddplab.engine import hang_watch

COMMAND = "silent-mix"  # python -m ddplab silent-mix

MODES = ("ddp", "detail", "detail-ddp")
LAYERS = (4, 1)  # Linear(4, 1): one bucket of 5 floats
BATCHES = [2, 3]  # per rank
BATCH_SIZE = 4
RANGE = 2.0  # the histogram's bins split [-RANGE, RANGE]


# ---------------------------------------------------------------- on every rank


def count_predictions(model, loader, bins: int) -> torch.Tensor:
    """How many of this rank's predictions fall in each of ``bins`` bins."""
    with torch.no_grad():
        return sum(torch.histc(model(X), bins=bins, min=-RANGE, max=RANGE) for X, _ in loader)


def train_then_count(ddp, optimizer, loader, bins: int) -> torch.Tensor:
    """One epoch, then the prediction counts of every rank, summed."""
    uneven.train_epoch(ddp, optimizer, loader)
    counts = count_predictions(ddp.module, loader, bins)
    dist.all_reduce(counts, group=ddp.process_group)
    return counts


class OneBucket(torch.nn.Module):
    """DDP's gradient all-reduce written out: once backward has every
    gradient, all-reduce them as one flat tensor and divide by the world size."""

    def __init__(self, module, process_group):
        super().__init__()
        self.module, self.process_group = module, process_group
        self.params, self.ready = list(module.parameters()), 0
        for param in self.params:
            param.register_post_accumulate_grad_hook(self._ready)

    def forward(self, X):
        return self.module(X)

    def _ready(self, param) -> None:
        self.ready += 1
        if self.ready == len(self.params):
            self.ready = 0
            flat = torch.cat([p.grad.flatten() for p in self.params])
            dist.all_reduce(flat, group=self.process_group)
            flat /= dist.get_world_size(self.process_group)
            torch.nn.utils.vector_to_parameters(flat, [p.grad for p in self.params])


def mix(ctx, call_id: str, mode: str, metric_size: int, seed: int,
        check_in_seconds: float) -> dict:
    """Train on ``BATCHES[rank]`` batches, then all-reduce the counts; note what each saw."""
    level = dist.get_debug_level()
    if mode != "ddp":
        dist.set_debug_level(dist.DebugLevel.DETAIL)  # read when a group is formed
    try:
        work = dist.new_group(backend="gloo", timeout=default_pg_timeout)
    finally:
        dist.set_debug_level(level)  # the pool's ranks are reused
    watch = hang_watch.work_groups(check_in_seconds)[1:]
    model = make_model(LAYERS, seed).to(ctx.device)
    wrapped = OneBucket(model, work) if mode == "detail" else DDP(model, process_group=work)
    optimizer = torch.optim.SGD(model.parameters(), lr=uneven.LR)
    loader = uneven.rank_loader(ctx, BATCHES[ctx.rank], BATCH_SIZE, seed, drop_last=False,
                                layers=LAYERS)
    batches = list(loader)
    steps = []

    def before_step(optimizer, args, kwargs):
        X, y = batches[len(steps)]
        local = copy.deepcopy(model)
        local.zero_grad(set_to_none=True)
        F.mse_loss(local(X), y).backward()
        steps.append(len(steps))
        hang_watch.note(call_id, ctx.rank, step=steps[-1], grad=flat_grad(model).tolist(),
                        own_grad=flat_grad(local).tolist())

    optimizer.register_step_pre_hook(before_step)
    try:
        counts = train_then_count(wrapped, optimizer, loader, metric_size)
        hang_watch.note(call_id, ctx.rank, counts=counts.tolist(),
                        own_counts=count_predictions(model, loader, metric_size).tolist())
    except RuntimeError as exc:
        hang_watch.note(call_id, ctx.rank, error=str(exc))
    hang_watch.finish(call_id, ctx.rank, work, watch[0], check_in_seconds)
    return {}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class SilentMix(Result):
    """What each rank noted: its gradients per step, the counts it got back, any error."""

    mode: str
    metric_size: int
    timeout: float
    outcome: str  # "finished", "hung" or "died"
    seconds: float
    steps_completed_per_rank: list[int]
    missing_ranks: list[int]
    grads: list[list[list[float]]]  # per rank and step: the gradient it stepped with
    own_grads: list[list[list[float]]]  # per rank and step: its own batch's gradient
    counts: list[list[float] | None]  # per rank: the all-reduced counts it got back
    own_counts: list[list[float] | None]  # per rank: its own counts
    errors: list[str | None]  # per rank: the error it raised
    error: str | None  # the caller's: a timeout, or a rank that died

    json_extras = ("rank0_counts_extra", "rank1_extra_step_mixed")

    @property
    def rank0_counts_extra(self) -> list[float] | None:
        """Rank 0's summed counts less its own (rank 1's counts, had it counted)."""
        if self.counts[0] is None:
            return None
        return [float(v) for v in np.subtract(self.counts[0], self.own_counts[0])]

    @property
    def rank1_extra_step_mixed(self) -> list[float] | None:
        """Rank 1's gradient on its extra step less half its own: rank 0's counts?"""
        if len(self.grads[1]) < BATCHES[1]:
            return None
        mixed = np.subtract(self.grads[1][-1], np.divide(self.own_grads[1][-1], 2))
        return [float(v) for v in mixed]

    def describe(self) -> str:
        lines = [f"mode {self.mode!r}, {self.metric_size} bins: {self.outcome} after "
                 f"{self.seconds:.1f} s (timeout {self.timeout:g} s)",
                 f"steps completed per rank: {self.steps_completed_per_rank}"]
        for rank in range(2):
            if self.own_counts[rank] is not None:
                lines.append(f"rank {rank}'s own counts:   {_short(self.own_counts[rank])}")
                lines.append(f"rank {rank}'s summed counts: {_short(self.counts[rank])}")
        if self.rank1_extra_step_mixed is not None:
            lines.append("rank 1's extra-step gradient less half its own:")
            lines.append("  " + _short(self.rank1_extra_step_mixed))
        lines += hang_watch.message_lines(self.errors, self.missing_ranks,
                                          "rank {rank} raised: {message:.220} ...")
        if self.outcome == "died":
            lines.append(textwrap.fill(self.error.splitlines()[0], 78))
        return "\n".join(lines)


def _short(values) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


def run(mode: str = "ddp", metric_size: int = 5, world_size: int = 2, seed: int = 0,
        timeout: float = 10.0) -> SilentMix:
    """Two ranks, 2 and 3 batches, then a count all-reduce; "hung" when a rank never ends."""
    one_of("mode", mode, MODES)
    int_in_range("world_size", world_size, 2, 2)  # the run is laid out for two ranks
    int_in_range("metric_size", metric_size, 1, 64)
    an_int("seed", seed)
    watched = hang_watch.run_watched(mix, world_size, timeout, mode=mode,
                                     catch_rank_errors=True, metric_size=metric_size, seed=seed,
                                     check_in_seconds=max(0.5, timeout / 2))

    def last(notes, key):
        return next((n[key] for n in reversed(notes) if key in n), None)

    return SilentMix.from_ranks(
        watched,
        mode=mode, metric_size=metric_size, timeout=timeout, outcome=watched.outcome,
        seconds=watched.seconds, steps_completed_per_rank=watched.steps_completed_per_rank,
        missing_ranks=hang_watch.missing_ranks(watched.check_in_messages),
        grads=[[n["grad"] for n in notes if "grad" in n] for notes in watched.notes],
        own_grads=[[n["own_grad"] for n in notes if "own_grad" in n] for notes in watched.notes],
        counts=[last(notes, "counts") for notes in watched.notes],
        own_counts=[last(notes, "own_counts") for notes in watched.notes],
        errors=[last(notes, "error") for notes in watched.notes], error=watched.error)


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--mode", choices=MODES, default="ddp")
    parser.add_argument("--metric-size", type=int, default=5,
                        help="bins of the count all-reduce (5: the bucket's size)")
    parser.add_argument("--seed", type=int, default=0)
