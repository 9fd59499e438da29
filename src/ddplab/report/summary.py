"""The report's summary table, from its JSON alone: each measured figure beside the model's
prediction, the ratio measured/predicted, each stage's verdicts, and what is missing. The rows
and verdicts are the stages' own (``stages.STAGES``), in the order they ran."""

from __future__ import annotations

from ddplab.report import stages
from ddplab.report.figures import shown
from ddplab.report.stage import part_of


def rows(data: dict) -> list[tuple[str, dict]]:
    """``(label, {measured, predicted, ratio, unit})`` for the table, in the report's order."""
    return [row for stage in stages.STAGES if part_of(data, stage.key)
            for row in stage.rows(part_of(data, stage.key))]


def verdicts(data: dict) -> list[str]:
    """The lines after the table: what each stage concludes (the margin, the predictions)."""
    return [line for stage in stages.STAGES if part_of(data, stage.key)
            for line in stage.verdicts(part_of(data, stage.key))]


def summary_lines(data: dict) -> list[str]:
    machine = data.get("machine") or {}
    lines = [f"ddplab report: {machine.get('world_size', '?')} rank(s) on "
             f"{len(machine.get('hosts', []))} host(s), {machine.get('backend', '?')}, "
             f"{', '.join(machine.get('devices', []))}; torch {machine.get('torch', '?')}",
             f"{'':<44} {'measured':>13} {'model':>13} {'ratio':>6}"]
    for label, figure in rows(data):
        ratio = figure.get("ratio")
        lines.append(f"{label:<44} {shown(figure['measured'], figure['unit']):>13} "
                     f"{shown(figure['predicted'], figure['unit']):>13} "
                     f"{'-' if ratio is None else f'{ratio:.2f}':>6}")
    lines += verdicts(data)
    for missing in data.get("missing") or []:
        lines.append(f"missing: {missing['part']}: {missing['why']}")
    if data.get("failure"):
        lines.append(f"FAILED: {data['failure']}")
    return lines
