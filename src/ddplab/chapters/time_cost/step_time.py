"""What does one DDP step cost? Forward, backward, waiting for the all-reduce, optimizer.

    python -m ddplab step-time --world-size 2 --batch-size 32 --json
    torchrun --nproc-per-node 2 -m ddplab step-time --batch-size 32 --json

Every rank trains an MLP of equal-width ``nn.Linear`` layers (``mlp.make_model``, He init)
with SGD and times each step with :mod:`ddplab.common.timed_step` (the one timed step the
chapter "Buckets" uses too), in seconds: forward, backward (computing, up to the last
gradient), waiting (from there to the end of ``backward()``) and optimizer.

``communicate=False`` trains the same model without DDP: the computation alone.
"""

from __future__ import annotations

import copy
import dataclasses

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common import bucket_rule, mlp, timed_step
from ddplab.common.checks import int_at_least, positive_int
from ddplab.common.progress import report as progress_report
from ddplab.common.results import Result

COMMAND = "step-time"  # python -m ddplab step-time

LAYERS = (512,) * 17  # 16 Linear(512, 512): 4,202,496 parameters, 16.8 MB of float32 gradients
# The lab's panel times 3 steps (their median) after the warmup, the page 7: a move re-runs
# every step, each a real forward, backward and all-reduce of the model, with DDP and without.
PANEL_ITERATIONS = 3


class _Trainer:
    """One copy of the model with its optimizer, with DDP (``communicate``) or without."""

    def __init__(self, ctx, model, communicate: bool, bucket_cap_mb):
        self.model = model
        self.gradients = timed_step.GradientTimes(self.model, ctx.device)
        # keep a reference: a DDP freed before backward never all-reduces
        self.wrapped = (DDP(self.model, bucket_cap_mb=bucket_cap_mb) if communicate
                        else self.model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-4)

    def step(self, X, y) -> dict:
        """One timed SGD step: seconds of each phase."""
        return timed_step.phases(timed_step.timed_step(self.wrapped, self.optimizer, X, y,
                                                       self.gradients))


def timed_steps(ctx, layers, batch_size: int, bucket_cap_mb, modes, iterations: int,
                warmup: int, seed: int) -> list[list[dict]]:
    """Per mode (``communicate``: True for DDP, False for the model alone), the seconds of
    each phase of ``iterations`` SGD steps after ``warmup`` untimed ones. With several modes
    their steps alternate, so that a change of the machine's load reaches them alike."""
    model = mlp.make_model(layers, seed, init="he").to(ctx.device)
    # One init; the other modes get copies with the same weights, made before any DDP wraps
    # the model (an init took 76-124 ms here, a copy 49-61 ms: two random fills to one copy).
    models = [model, *(copy.deepcopy(model) for _ in modes[1:])]
    trainers = [_Trainer(ctx, m, communicate, bucket_cap_mb)
                for m, communicate in zip(models, modes)]
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    out = [[] for _ in modes]
    for i in range(warmup + iterations):  # DDP rebuilds its buckets after iteration 0
        X, y = (t[rows].to(ctx.device)
                for t in mlp.make_batch(layers, batch_size, ctx.world_size, seed, i))
        for times, trainer in zip(out, trainers):
            phases = trainer.step(X, y)
            if i >= warmup:
                times.append(phases)
    return out


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class StepTime(Result):
    """Measured SGD steps on every rank: seconds per phase, per rank and iteration."""

    layers: tuple
    world_size: int
    batch_size: int
    bucket_cap_mb: float | None
    communicate: bool
    params: int
    ranks: list[list[dict]]  # per rank, per timed iteration: seconds of each phase and "step"

    json_extras = ("forward_ms", "backward_ms", "waiting_ms", "optimizer_ms", "step_ms",
                   "samples_per_s")

    def median(self, phase: str) -> float:
        """Seconds of ``phase`` (or ``"step"``) in the run's step, ``timed_step.median_step``:
        the slowest rank's (the one every all-reduce waits for) at the median iteration."""
        return timed_step.median_step(self.ranks)[phase]

    forward_ms = property(lambda self: 1e3 * self.median("forward"))
    backward_ms = property(lambda self: 1e3 * self.median("backward"))
    waiting_ms = property(lambda self: 1e3 * self.median("waiting"))
    optimizer_ms = property(lambda self: 1e3 * self.median("optimizer"))
    step_ms = property(lambda self: 1e3 * self.median("step"))

    def phases_ms(self) -> dict:
        """Ms of each phase of the run's step (they add up to ``step_ms``): the figure's bar."""
        return {p: 1e3 * self.median(p) for p in timed_step.PHASES}

    @property
    def samples_per_s(self) -> float:
        return self.world_size * self.batch_size / self.median("step")

    def json_fields(self) -> dict:
        data = super().json_fields()
        data.pop("ranks")
        data["step_ms_per_iteration"] = [1e3 * s for s in timed_step.slowest_steps(self.ranks)]
        return data

    @property
    def label(self) -> str:
        what = "DDP" if self.communicate else "no communication"
        return f"{self.world_size} rank{'s' if self.world_size > 1 else ''}, {what}"

    def describe(self) -> str:
        phases = ", ".join(f"{p} {ms:.1f}" for p, ms in self.phases_ms().items())
        return (f"MLP of {self.params:,} parameters, {self.label}, {self.batch_size} samples "
                f"per rank:\n  step {self.step_ms:.1f} ms (median, slowest rank)\n  {phases} ms")


def run(world_size: int = 2, batch_size: int = 32, layers=LAYERS, bucket_cap_mb=None,
        communicate: bool = True, iterations: int = 7, warmup: int = 2, seed: int = 0,
        timeout: float = 60.0) -> StepTime:
    """Time ``iterations`` SGD steps of the MLP ``layers`` on ``world_size`` ranks."""
    return _timed(world_size, batch_size, layers, bucket_cap_mb, (bool(communicate),),
                  iterations, warmup, seed, timeout)[0]


def paired(world_size: int = 2, batch_size: int = 32, layers=LAYERS, bucket_cap_mb=None,
           iterations: int = 7, warmup: int = 2, seed: int = 0,
           timeout: float = 60.0) -> tuple[StepTime, StepTime]:
    """``(alone, ddp)``: the same steps without DDP and with it, alternating in one run."""
    alone, ddp = _timed(world_size, batch_size, layers, bucket_cap_mb, (False, True),
                        iterations, warmup, seed, timeout)
    return alone, ddp


def describe_pair(pair: tuple[StepTime, StepTime]) -> str:
    """:func:`paired`'s two runs, and what DDP added to a step."""
    alone, ddp = pair
    return "\n".join([alone.describe(), ddp.describe(),
                      f"DDP added {ddp.step_ms - alone.step_ms:.1f} ms per step "
                      f"({ddp.step_ms / alone.step_ms:.2f}x), of which "
                      f"{ddp.waiting_ms:.1f} ms waiting for the all-reduce"])


def describe_breakdown(runs: list[StepTime]) -> str:
    """:func:`breakdown`'s runs (or any), a row each: the step and its phases in ms."""
    return timed_step.table({run.label: run for run in runs})


def _timed(world_size, batch_size, layers, bucket_cap_mb, modes, iterations, warmup, seed,
           timeout) -> list[StepTime]:
    layers = mlp.check_layers(layers)
    for name, value in (("batch_size", batch_size), ("iterations", iterations)):
        positive_int(name, value)
    int_at_least("warmup", warmup, 2, "DDP rebuilds its buckets after iteration 0")
    bucket_rule.check_cap(bucket_cap_mb)
    ranks = ddplab.run(timed_steps, world_size, timeout=timeout, layers=layers,
                       batch_size=batch_size, bucket_cap_mb=bucket_cap_mb, modes=modes,
                       iterations=iterations, warmup=warmup, seed=seed)
    return [StepTime.from_ranks(ranks, layers=layers, world_size=len(ranks), batch_size=batch_size,
                                bucket_cap_mb=bucket_cap_mb, communicate=communicate,
                                params=mlp.param_count(layers), ranks=[r[m] for r in ranks])
            for m, communicate in enumerate(modes)]


def breakdown(world_sizes=(1, 2, 4), batch_size: int = 32, layers=LAYERS, iterations: int = 7,
              progress=None) -> list[StepTime]:
    """At each world size: the computation alone, then DDP (their steps alternate)."""
    runs = []
    for i, world_size in enumerate(world_sizes):
        progress_report(progress, i, len(world_sizes), f"world size {world_size}")
        runs += paired(world_size, batch_size, layers, iterations=iterations)
    progress_report(progress, len(world_sizes), len(world_sizes), "done")
    return runs


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank")
    parser.add_argument("--layers", default=",".join(map(str, LAYERS)),
                        help="widths of the MLP's Linear layers (default 16 x 512 x 512)")
    parser.add_argument("--bucket-cap-mb", type=float, default=None)
    parser.add_argument("--iterations", type=int, default=7, help="timed steps after warmup")
    parser.add_argument("--no-communication", dest="communicate", action="store_false",
                        help="the same steps without DDP: the computation alone")
