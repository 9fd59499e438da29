"""Strong and weak scaling: what adding ranks buys, measured against one rank alone.

    from ddplab.chapters.time_cost import scaling, step_time
    runs = step_time.breakdown(world_sizes=(1, 2, 4))
    result = scaling.run(world_sizes=(1, 2, 4), batch_size=32, global_batch_size=64, runs=runs)

Weak scaling keeps ``batch_size`` per rank, so the global batch grows with the world size;
strong scaling divides ``global_batch_size`` over the ranks, so it stays. Ideal is N times the
samples per second of one rank in both; the efficiency is the measured share of that. Every
DDP run is paired with the same steps without DDP (``step_time.paired``). The result records
how many cores the ranks could run on (:func:`cores`): beyond that, ranks share them.
"""

from __future__ import annotations

import dataclasses
import os

from ddplab.chapters.time_cost import step_time
from ddplab.common import mlp
from ddplab.common.progress import report as progress_report
from ddplab.common.results import Result


def cores() -> int:
    """The CPU cores this process (and the ranks it starts) may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _reuse_or_pair(runs: list, world_size: int, batch_size: int, layers,
                   iterations: int) -> tuple:
    """``(alone, ddp)`` from ``runs`` if both are there, else a new ``step_time.paired``
    (added to ``runs``, this call's own list)."""
    found = {r.communicate: r for r in runs
             if (r.world_size, r.batch_size, r.layers, r.bucket_cap_mb) ==
             (world_size, batch_size, layers, None)}
    if len(found) < 2:
        pair = step_time.paired(world_size, batch_size, layers, iterations=iterations)
        found = dict(zip((False, True), pair))
        runs += found.values()
    return found[False], found[True]


@dataclasses.dataclass
class Scaling(Result):
    """Weak scaling keeps ``batch_size`` per rank (the global batch grows with the ranks);
    strong scaling divides ``global_batch_size`` over them (it stays). Both against one rank
    training alone, without DDP, on the per-rank batch (weak) or the global batch (strong)."""

    batch_size: int
    global_batch_size: int
    weak: dict  # world size -> step_time.StepTime
    strong: dict
    alone: step_time.StepTime  # 1 rank, batch_size, no DDP
    alone_global: step_time.StepTime  # 1 rank, global_batch_size, no DDP
    cores: int  # CPU cores the ranks ran on: more ranks than this share them

    @property
    def shared_from(self) -> int | None:
        """The first world size whose ranks shared cores, if any."""
        return next((w for w in self.weak if w > self.cores), None)

    def efficiency(self, kind: str, world_size: int) -> float:
        """Samples per second against ``world_size`` times one rank alone."""
        run, alone = ((self.weak[world_size], self.alone) if kind == "weak"
                      else (self.strong[world_size], self.alone_global))
        return run.samples_per_s / (world_size * alone.samples_per_s)

    def describe(self) -> str:
        lines = [f"{'ranks':>5} {'weak: samples/s':>16} {'efficiency':>11} "
                 f"{'strong: samples/s':>18} {'efficiency':>11}"]
        for w in self.weak:
            lines.append(f"{w:>5} {self.weak[w].samples_per_s:16.0f} "
                         f"{self.efficiency('weak', w):11.0%} "
                         f"{self.strong[w].samples_per_s:18.0f} "
                         f"{self.efficiency('strong', w):11.0%}")
        return "\n".join(lines)


def run(world_sizes=(1, 2, 4), batch_size: int = 32, global_batch_size: int = 64,
        layers=step_time.LAYERS, iterations: int = 7, runs=None, progress=None) -> Scaling:
    """Measure both kinds of scaling; ``runs`` (``StepTime`` from :func:`step_time.paired`)
    are reused where they match a world size, batch size and model; ``runs`` is not changed.
    Each DDP run is paired with the same steps without DDP (``paired``)."""
    runs = list(runs or ())
    layers = mlp.check_layers(layers)
    for w in world_sizes:
        if global_batch_size % w:
            raise ValueError(f"global_batch_size {global_batch_size} does not split evenly "
                             f"over {w} ranks")
    get = lambda w, b: _reuse_or_pair(runs, w, b, layers, iterations)  # noqa: E731
    progress_report(progress, 0, 2, "weak scaling")
    weak = {w: get(w, batch_size)[1] for w in world_sizes}
    progress_report(progress, 1, 2, "strong scaling")
    strong = {w: get(w, global_batch_size // w)[1] for w in world_sizes}
    progress_report(progress, 2, 2, "done")
    return Scaling.from_ranks((weak, strong), batch_size, global_batch_size, weak, strong,
                              get(1, batch_size)[0], get(1, global_batch_size)[0], cores())
