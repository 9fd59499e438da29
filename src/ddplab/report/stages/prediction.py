"""What the cost model, calibrated on this run, says for two and four times the nodes: a
prediction, labelled as one, with nothing measured beside it."""

from __future__ import annotations

from ddplab.report.figures import predicted_only, shown
from ddplab.report.settings import ReportSettings
from ddplab.report.stage import NEEDS_RANKS, Section, Stage, Table
from ddplab.report.stages.machine import MachineSection
from ddplab.report.stages.step import StepSection

NODE_MULTIPLES = (2, 4)


def measure(s: ReportSettings, machine: MachineSection, step: StepSection) -> Section:
    if step.model.link is None:
        return Section({"missing": f"a prediction for more nodes {NEEDS_RANKS}"})
    out = {"what": "a PREDICTION of the calibrated model, not a measurement: the same ranks "
                   "per node, every link like the one measured here",
           "nodes": {}}
    for multiple in NODE_MULTIPLES:
        p = step.model.predict(step.world_size * multiple)
        out["nodes"][str(machine.nodes * multiple)] = {
            "ranks": p.ranks, "step": predicted_only(p.step_s, "s"),
            "exposed_allreduce": predicted_only(p.exposed_s, "s"),
            "samples_per_s": predicted_only(p.samples_per_s, "samples/s"),
            "efficiency": predicted_only(p.efficiency, "1")}
    return Section(out)


def table(part: dict) -> Table | None:
    if not part.get("what"):
        return None
    return Table(("nodes", "ranks", "step (model)", "exposed all-reduce (model)",
                  "samples/s (model)", "efficiency (model)"),
                 [(nodes, p["ranks"], shown(p["step"]["predicted"], "s"),
                   shown(p["exposed_allreduce"]["predicted"], "s"),
                   shown(p["samples_per_s"]["predicted"], "samples/s"),
                   shown(p["efficiency"]["predicted"], "1"))
                  for nodes, p in part["nodes"].items()], note=part["what"])


def verdicts(part: dict) -> list[str]:
    return [f"PREDICTION, {nodes} nodes ({p['ranks']} ranks): step "
            f"{shown(p['step']['predicted'], 's')}, efficiency "
            f"{shown(p['efficiency']['predicted'], '1')}"
            for nodes, p in (part.get("nodes") or {}).items()]


STAGE = Stage(
    name="prediction", key="prediction", what="prediction for more nodes", measure=measure,
    needs=("machine", "step"), title="Prediction for more nodes",
    about="What the model, calibrated on the measurements above, says for two and four times "
          "the nodes.",
    book="time_cost.md#from-here-to-a-cluster-a-cost-model", table=table, verdicts=verdicts)
