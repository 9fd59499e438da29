"""The cost model, calibrated on this machine and checked against the steps measured on it.

    from ddplab.chapters.time_cost import calibration
    check = calibration.run()        # a few seconds of real runs
    print(check.describe())          # measured and predicted step times, side by side

Everything the model needs is measured in the same call, in ``rounds`` interleaved rounds so
that a change of the machine's load reaches inputs and checks alike:

- the all-reduce at 2 ranks (``allreduce.run``): ``alpha`` and ``B`` of ``T(S) = alpha + S/B``,
  turned into a ring link by ``cost_model.link_from_fit``, and the memory-copy bandwidth, at
  which DDP copies gradients into its buckets and back;
- at each world size, the ranks training alone, without DDP
  (``step_time.run(communicate=False)``): seconds of forward and backward per sample, and of
  the optimizer step. Measured with as many ranks busy as in the check, because ranks on one
  machine share its memory bandwidth: two ranks compute more slowly than one, which GPUs, each
  with a memory of its own, do not.

Then DDP's steps at each world size are measured and set beside ``cost_model.predict_step``: the
check is of what the model adds to the computation, the all-reduce and DDP's copies.
"""

from __future__ import annotations

import dataclasses
import statistics
import textwrap

from ddplab.chapters.time_cost import allreduce, cost_model, step_time
from ddplab.common import mlp
from ddplab.common.progress import report as progress_report
from ddplab.common.results import Result

# How far measured and predicted step times may be apart, as a factor either way. The model
# knows nothing of what else runs on the machine: on a 2-core VM shared with other jobs, step
# times of the same run moved by up to 1.5x between rounds, and two ranks slow each other's
# computation down (memory bandwidth, the gloo threads beside them) by up to 1.4x.
MARGIN = 2.0
FIT_SIZES = allreduce.SIZES[:7]  # 4 KiB to 16 MiB: the chapter's gradients are 16 MiB


@dataclasses.dataclass(frozen=True)
class Calibrated:
    """The model with its inputs measured on one machine, and its step from them: the one
    ``predict`` this chapter's check and ``ddplab report`` share."""

    params: int
    batch_size: int
    seconds_per_sample: float  # forward and backward, per sample, measured without DDP
    optimizer_s: float
    copy_bandwidth: float | None  # bytes copied per second (DDP's copies into buckets and back)
    link: cost_model.Link | None  # the all-reduce's link; None where one rank all-reduces nothing

    def predict(self, ranks: int, batch_size: int | None = None, bucket_mb: float = 25.0,
                accumulation: int = 1) -> cost_model.Step:
        """The model's DDP step at ``ranks`` ranks, every link like the one measured."""
        if ranks > 1 and self.link is None:
            raise ValueError("a prediction for several ranks needs the all-reduce's link")
        return cost_model.predict_step(
            self.params, batch_size or self.batch_size, self.seconds_per_sample,
            gpus_per_node=ranks, intra=self.link, bucket_mb=bucket_mb,
            accumulation=accumulation, optimizer_s=self.optimizer_s,
            copy_bandwidth=self.copy_bandwidth)


@dataclasses.dataclass
class Calibration(Result):
    """The model's inputs as measured here, and measured against predicted step times."""

    params: int
    batch_size: int
    alpha_s: float  # the all-reduce fit at 2 ranks
    bandwidth: float
    copy_bandwidth: float
    seconds_per_sample: dict  # world size -> forward and backward, ranks alone, per sample
    optimizer_s: dict  # world size -> seconds
    measured_s: dict  # world size -> median step time of DDP (median over rounds)
    rounds: int

    @property
    def link(self) -> cost_model.Link:
        return cost_model.link_from_fit(self.alpha_s, self.bandwidth, 2, "this machine, gloo")

    def predict(self, world_size: int, batch_size: int | None = None,
                bucket_mb: float = 25.0, accumulation: int = 1,
                computed_at: int | None = None) -> cost_model.Step:
        """The model's step on this machine, as if each rank had a core of its own; with the
        computation measured at ``computed_at`` ranks (default: ``world_size`` where it was
        measured, else 1)."""
        key = computed_at or (world_size if world_size in self.seconds_per_sample else 1)
        return self.calibrated(key).predict(world_size, batch_size, bucket_mb, accumulation)

    def calibrated(self, computed_at: int) -> Calibrated:
        """The model's inputs with the computation measured at ``computed_at`` ranks."""
        return Calibrated(self.params, self.batch_size, self.seconds_per_sample[computed_at],
                          self.optimizer_s[computed_at], self.copy_bandwidth, self.link)

    def ratio(self, world_size: int) -> float:
        """Measured over predicted step time."""
        return self.measured_s[world_size] / self.predict(world_size).step_s

    @property
    def agrees(self) -> bool:
        return all(1 / MARGIN <= self.ratio(w) <= MARGIN for w in self.measured_s)

    def describe(self) -> str:
        per_sample = ", ".join(f"{1e3 * s:.2f}\xa0ms\xa0at\xa0{w}"  # \xa0: kept on one line
                               for w, s in self.seconds_per_sample.items())
        lines = [textwrap.fill(
                     f"calibrated here ({self.rounds} rounds, medians): all-reduce alpha "
                     f"{1e6 * self.alpha_s:.0f} us, B {self.bandwidth / 1e9:.2f} GB/s; memory "
                     f"copy {self.copy_bandwidth / 1e9:.2f} GB/s; forward and backward per "
                     f"sample {per_sample} rank(s)", 78, subsequent_indent="  ")
                 .replace("\xa0", " "),
                 f"{'ranks':>5} {'measured ms':>12} {'measured/model':>15}  "
                 f"model ms = compute + copy + exposed all-reduce + optimizer"]
        for w, measured in self.measured_s.items():
            p = self.predict(w)
            lines.append(f"{w:>5} {1e3 * measured:12.1f} {self.ratio(w):15.2f}  "
                         f"{1e3 * p.step_s:8.1f} = {1e3 * p.compute_s:.1f} + "
                         f"{1e3 * p.copy_s:.1f} + {1e3 * p.exposed_s:.1f} + "
                         f"{1e3 * p.optimizer_s:.1f}")
        lines.append(f"within a factor of {MARGIN:g} at every world size: {self.agrees}")
        return "\n".join(lines)


def run(world_sizes=(1, 2), batch_size: int = 32, layers=step_time.LAYERS, rounds: int = 2,
        iterations: int = 5, progress=None) -> Calibration:
    """Measure the model's inputs and DDP's steps at ``world_sizes``, interleaved."""
    fits = []
    alone = {w: [] for w in world_sizes}
    measured = {w: [] for w in world_sizes}
    total = rounds * (1 + len(world_sizes))
    for r in range(rounds):
        done = r * (1 + len(world_sizes))
        progress_report(progress, done, total, f"round {r + 1}: all-reduce")
        fits.append(allreduce.run(2, FIT_SIZES, repeats=5))
        for i, w in enumerate(world_sizes):
            progress_report(progress, done + 1 + i, total, f"round {r + 1}: {w} rank(s)")
            without, ddp = step_time.paired(w, batch_size, layers, iterations=iterations)
            alone[w].append(without)
            measured[w].append(ddp.median("step"))
    progress_report(progress, total, total, "done")
    median = statistics.median
    return Calibration.from_ranks((fits, alone),
        params=mlp.param_count(layers), batch_size=batch_size,
        alpha_s=median(f.alpha_s for f in fits),
        bandwidth=median(f.bandwidth_bytes_per_s for f in fits),
        copy_bandwidth=median(f.copy_bandwidth_bytes_per_s for f in fits),
        seconds_per_sample={w: median((a.median("forward") + a.median("backward")) / batch_size
                                                 for a in runs) for w, runs in alone.items()},
        optimizer_s={w: median(a.median("optimizer") for a in runs)
                     for w, runs in alone.items()},
        measured_s={w: median(m) for w, m in measured.items()}, rounds=rounds)
