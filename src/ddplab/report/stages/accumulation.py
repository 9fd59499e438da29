"""Optimizer steps of several micro-batches with ``no_sync`` and with every micro-batch synced
(the chapter's ``accumulation_time.run``), against the calibrated model. Its part of the JSON
lies inside the buckets stage's (``buckets.accumulation``), its figure in that section of the
page."""

from __future__ import annotations

import dataclasses

from ddplab.chapters.time_cost import accumulation_time, step_time
from ddplab.report.figures import compared, measured_only
from ddplab.report.settings import MICRO_BATCH_SIZE, ReportSettings
from ddplab.report.stage import NEEDS_RANKS, Section, Stage
from ddplab.report.stages.step import StepSection


@dataclasses.dataclass
class AccumulationSection(Section):
    timing: accumulation_time.Timing | None = None  # None at one rank


def measure(s: ReportSettings, step: StepSection) -> AccumulationSection:
    if step.world_size < 2:
        return AccumulationSection({"missing": f"accumulation {NEEDS_RANKS}"})
    timing = accumulation_time.run(step.world_size, MICRO_BATCH_SIZE, s.micro_batches,
                                   s.layers, iterations=s.accumulation_iterations,
                                   timeout=s.timeout)
    # The model's compute is batch x seconds per sample, measured at the batch it predicts: a
    # micro-batch of 8 costs more than 8 samples at BATCH_SIZE's rate, because each backward
    # writes (or adds to) every parameter's gradient whatever the batch. Calibrated at
    # BATCH_SIZE, the rows ran 1.7-2.5x the model's.
    alone, _ = step_time.paired(step.world_size, MICRO_BATCH_SIZE, s.layers,
                                iterations=s.iterations, timeout=s.timeout)
    micro = dataclasses.replace(step.model, seconds_per_sample=(
        alone.median("forward") + alone.median("backward")) / MICRO_BATCH_SIZE)
    rows = []
    for k, no_sync, every in zip(timing.micro_batches, timing.no_sync_s,
                                 timing.every_micro_batch_s):
        once = micro.predict(step.world_size, batch_size=MICRO_BATCH_SIZE, accumulation=k)
        one = micro.predict(step.world_size, batch_size=MICRO_BATCH_SIZE)
        # every micro-batch synced: k steps' worth of everything but the optimizer
        each = k * (one.step_s - one.optimizer_s) + one.optimizer_s
        rows.append({"micro_batches": k, "no_sync": compared(no_sync, once.step_s, "s"),
                     "every_micro_batch": compared(every, each, "s")})
    return AccumulationSection({
        "batch_size": MICRO_BATCH_SIZE, "rows": rows,
        "seconds_per_sample": {
            "at_step_batch": measured_only(step.model.seconds_per_sample, "s"),
            "at_micro_batch": measured_only(micro.seconds_per_sample, "s")}}, timing)


def figures(section: AccumulationSection) -> list:
    if section.timing is None:
        return []
    from ddplab.chapters.time_cost import plots  # matplotlib: the page only

    return [plots.accumulation(section.timing)]


def rows(part: dict) -> list:
    return [(f"step of {row['micro_batches']} micro-batches, no_sync", row["no_sync"])
            for row in part.get("rows") or []]


STAGE = Stage(
    name="accumulation", key="buckets.accumulation", what="accumulation with no_sync",
    measure=measure, needs=("step",), figures=figures, rows=rows)
