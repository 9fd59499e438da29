"""What accumulation saves in time: optimizer steps of ``micro_batches`` micro-batches, with one
all-reduce per step (``accumulation.accumulate``) or one after every micro-batch.

Every step is ``ddplab.common.timed_step``'s (from a barrier to the end of ``optimizer.step()``,
the slowest rank's, the median over steps), on the chapter's model (``step_time.LAYERS``), after
two untimed steps: DDP all-reduces one bucket in its first and rebuilds its buckets after it.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.chapters.time_cost.accumulation import accumulate, micro_batches, sync_every_micro_batch
from ddplab.chapters.time_cost.step_time import LAYERS  # the chapter's model
from ddplab.common import mlp, timed_step
from ddplab.common.checks import int_at_least, positive_int
from ddplab.common.progress import report as progress_report
from ddplab.common.results import Result


def timed_steps(ctx, layers, batch_size: int, count: int, iterations: int, warmup: int,
                seed: int) -> dict:
    """``timed_step.timed`` records of ``iterations`` optimizer steps of ``count``
    micro-batches, after ``warmup`` untimed ones, per way (``accumulate``, and
    ``sync_every_micro_batch``): the two ways' steps alternate, on two copies of the model, so
    that a change of the machine's load reaches both alike (as ``step_time.paired``)."""
    ways = {"no_sync": accumulate, "every micro-batch": sync_every_micro_batch}
    models = {way: mlp.make_model(layers, seed, init="he").to(ctx.device) for way in ways}
    ddps = {way: DDP(model) for way, model in models.items()}  # referenced until backward
    optimizers = {way: torch.optim.SGD(model.parameters(), lr=1e-4)
                  for way, model in models.items()}

    def step(way, batches):
        optimizers[way].zero_grad()
        ways[way](ddps[way], batches)
        optimizers[way].step()

    records = {way: [] for way in ways}
    for i in range(warmup + iterations):
        batches = micro_batches(ctx, layers, batch_size, count, seed, first=i * count)
        for way in ways:
            record = timed_step.timed(step, ctx.device, way, batches)
            if i >= warmup:
                records[way].append(record)
    return records


@dataclasses.dataclass
class Timing(Result):
    """Seconds of the run's step (``timed_step.median_step``) for each number of
    micro-batches, with one all-reduce per step and with one per micro-batch."""

    world_size: int
    batch_size: int
    params: int
    micro_batches: list[int]
    no_sync_s: list[float]
    every_micro_batch_s: list[float]

    def describe(self) -> str:
        lines = [f"{self.world_size} ranks, {self.batch_size} samples per micro-batch, "
                 f"{self.params:,} parameters; ms per optimizer step (median)",
                 f"{'k':>3} {'global batch':>12} {'no_sync':>9} {'every micro-batch':>18}"]
        for k, a, b in zip(self.micro_batches, self.no_sync_s, self.every_micro_batch_s):
            lines.append(f"{k:>3} {k * self.batch_size * self.world_size:>12} {1e3 * a:9.1f} "
                         f"{1e3 * b:18.1f}")
        return "\n".join(lines)


def run(world_size: int = 2, batch_size: int = 8, micro_batches=(1, 2, 4, 8), layers=None,
        iterations: int = 3, warmup: int = 2, progress=None, timeout: float = 60.0) -> Timing:
    """Time optimizer steps of each number of ``micro_batches``, with and without
    synchronising every micro-batch (one ``ddplab.run`` per number, the two ways alternating)."""
    layers = mlp.check_layers(LAYERS if layers is None else layers)
    positive_int("batch_size", batch_size)
    positive_int("iterations", iterations)
    int_at_least("warmup", warmup, 2, "DDP rebuilds its buckets after iteration 0")
    for count in micro_batches:
        positive_int("each of micro_batches", count)
    out = {"no_sync": [], "every micro-batch": []}
    for i, count in enumerate(micro_batches):
        progress_report(progress, i, len(micro_batches), f"{count} micro-batches")
        ranks = ddplab.run(timed_steps, world_size, timeout=timeout, layers=layers,
                           batch_size=batch_size, count=count, iterations=iterations,
                           warmup=warmup, seed=0)
        for way, steps in out.items():
            steps.append(timed_step.median_step([r[way] for r in ranks])["step"])
    progress_report(progress, len(micro_batches), len(micro_batches), "done")
    return Timing.from_ranks(ranks, world_size=world_size, batch_size=batch_size,
                             params=mlp.param_count(layers),
                             micro_batches=list(micro_batches), no_sync_s=out["no_sync"],
                             every_micro_batch_s=out["every micro-batch"])
