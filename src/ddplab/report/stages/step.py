"""One DDP step of the report's model with and without DDP (the chapter's ``step_time.paired``),
and the chapter's cost model calibrated on this run: the one model every later stage predicts
with.

The chapter's own ``calibration.run`` fits its link at 2 ranks and measures 1 and 2 ranks in
runs of its own, which torchrun cannot start (only the launched world size runs there). So the
link is the one fitted over every rank of this run (the all-reduce stage), and the computation
per sample and the optimizer step are taken from the same ranks training without DDP
(``paired``'s first half, every rank busy, as the chapter measures it)."""

from __future__ import annotations

import dataclasses

from ddplab.chapters.time_cost import calibration, cost_model, step_time
from ddplab.common import mlp
from ddplab.report.figures import compared, measured_only, predicted_only
from ddplab.report.settings import BATCH_SIZE, ReportSettings
from ddplab.report.stage import Section, Stage
from ddplab.report.stages.allreduce import AllReduceSection
from ddplab.report.stages.machine import MachineSection


@dataclasses.dataclass
class StepSection(Section):
    world_size: int
    model: calibration.Calibrated  # the cost model with every input measured in this run
    alone: step_time.StepTime  # the same ranks' steps without DDP
    ddp: step_time.StepTime


def measure(s: ReportSettings, machine: MachineSection, allreduce: AllReduceSection) -> StepSection:
    world_size = machine.world_size
    alone, ddp = step_time.paired(world_size, BATCH_SIZE, s.layers, iterations=s.iterations,
                                  timeout=s.timeout)
    model = calibration.Calibrated(
        mlp.param_count(s.layers), BATCH_SIZE,
        seconds_per_sample=(alone.median("forward") + alone.median("backward")) / BATCH_SIZE,
        optimizer_s=alone.median("optimizer"), copy_bandwidth=allreduce.copy_bandwidth,
        link=allreduce.link)
    p = model.predict(world_size)
    share = cost_model.BACKWARD_SHARE
    # DDP copies each gradient into its bucket during backward and back after the all-reduce
    # (at the end of backward(), "waiting" here): half the model's copy time in each
    predicted = {"forward": p.compute_s * (1 - share),
                 "backward": p.compute_s * share + p.copy_s / 2,
                 "waiting": p.exposed_s + p.copy_s / 2, "optimizer": p.optimizer_s,
                 "step": p.step_s}
    step = {phase: compared(ddp.median(phase), predicted[phase], "s") for phase in predicted}
    return StepSection({
        "params": model.params, "batch_size": BATCH_SIZE, "world_size": world_size,
        "phases": step,
        "without_ddp": {phase: measured_only(alone.median(phase), "s") for phase in predicted},
        "samples_per_s": compared(ddp.samples_per_s, p.samples_per_s, "samples/s"),
        # scaling efficiency, measured: the same ranks' steps without communication (every
        # rank busy, as in DDP) against DDP's
        "efficiency": compared(alone.median("step") / ddp.median("step"), p.efficiency, "1"),
        "model": {"compute": predicted_only(p.compute_s, "s"),
                  "copies": predicted_only(p.copy_s, "s"),
                  "exposed_allreduce": predicted_only(p.exposed_s, "s"),
                  "optimizer": predicted_only(p.optimizer_s, "s")},
        "margin": calibration.MARGIN,
        "within_margin": 1 / calibration.MARGIN <= step["step"]["ratio"] <= calibration.MARGIN,
        "buckets": p.buckets,
    }, world_size, model, alone, ddp)


def figures(section: StepSection) -> list:
    from ddplab.chapters.time_cost import plots  # matplotlib: the page only

    return [plots.step_phases([section.alone, section.ddp])]


def rows(part: dict) -> list:
    return [(f"DDP step: {phase}", figure) for phase, figure in part["phases"].items()] + [
        ("DDP step: scaling efficiency", part["efficiency"])]


def verdicts(part: dict) -> list[str]:
    return [f"measured/model step within a factor of {part['margin']:g}: "
            f"{part['within_margin']}"]


STAGE = Stage(
    name="step", key="step", what="one DDP step, with and without DDP", measure=measure,
    needs=("machine", "allreduce"), title="One DDP step",
    about="Forward, backward, the wait for the all-reduce that backward did not hide, and the "
          "optimizer, beside the same steps without DDP; the model adds to that computation "
          "DDP's copies and the exposed all-reduce.",
    book="time_cost.md#what-one-step-costs", figures=figures, rows=rows, verdicts=verdicts)
