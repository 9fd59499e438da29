"""DDP's step at a few ``bucket_cap_mb`` values (the chapter's ``bucket_size.run``) against the
calibrated model, and the model's best bucket count from the all-reduce's fit."""

from __future__ import annotations

import dataclasses

from ddplab.chapters.time_cost import bucket_size
from ddplab.report.figures import compared, value
from ddplab.report.settings import BATCH_SIZE, MiB, ReportSettings
from ddplab.report.stage import NEEDS_RANKS, Section, Stage
from ddplab.report.stages.allreduce import AllReduceSection
from ddplab.report.stages.step import StepSection


@dataclasses.dataclass
class BucketsSection(Section):
    sweep: bucket_size.BucketSweep | None = None  # None at one rank
    tradeoff: bucket_size.Tradeoff | None = None  # the model's, where the fit gives one


def measure(s: ReportSettings, allreduce: AllReduceSection, step: StepSection) -> BucketsSection:
    if step.world_size < 2:
        return BucketsSection({"missing": f"bucket sizes and accumulation {NEEDS_RANKS}"})
    model, fit = step.model, allreduce.fit
    sweep = bucket_size.run(s.caps, step.world_size, BATCH_SIZE, s.layers, s.iterations,
                            timeout=s.timeout)
    nbytes = 4 * model.params
    rows = []
    for cap, n, run in zip(sweep.caps, sweep.buckets, sweep.runs):
        p = model.predict(step.world_size, bucket_mb=cap)
        rows.append({"bucket_cap_mb": cap, "buckets": n,
                     "step": compared(run.median("step"), p.step_s, "s"),
                     "waiting": compared(run.median("waiting"), p.exposed_s + p.copy_s / 2,
                                         "s")})
    section = BucketsSection({"caps": rows, "measured_best_buckets": sweep.best_buckets}, sweep)
    if fit.alpha_s > 0 and fit.bandwidth != float("inf"):
        best = bucket_size.best_bucket_count(nbytes, fit.bandwidth, fit.alpha_s)
        section.tradeoff = bucket_size.tradeoff(nbytes, fit.bandwidth, fit.alpha_s,
                                                max(32, max(sweep.buckets)))
        section.data["model_best"] = {"buckets": value(best, "buckets"),
                                      "bucket_cap_mb": value(nbytes / best / MiB, "MiB")}
    else:
        section.data["model_best"] = {"missing": "the all-reduce fit has no latency or no "
                                                 "bandwidth to trade off (see "
                                                 "allreduce.fit.note)"}
    return section


def figures(section: BucketsSection) -> list:
    if section.tradeoff is None:
        return []
    from ddplab.chapters.time_cost import plots  # matplotlib: the page only

    return [plots.bucket_tradeoff(section.sweep, section.tradeoff)]


def rows(part: dict) -> list:
    return [(f"step, bucket_cap_mb {row['bucket_cap_mb']:g} ({row['buckets']} buckets)",
             row["step"]) for row in part.get("caps") or []]


STAGE = Stage(
    name="buckets", key="buckets", what="bucket sizes", measure=measure,
    needs=("allreduce", "step"), title="Bucket size and accumulation",
    about="Step time at several bucket_cap_mb values against the model's best bucket count "
          "sqrt(S/(w o)); with no_sync, one all-reduce per optimizer step.",
    book="time_cost.md#overlap-and-bucket-size", figures=figures, rows=rows)
