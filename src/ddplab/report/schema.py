"""What ``report.json`` must hold, checked by the tests and by CI's runs of the command: a part
for every stage (``stages.STAGES``), or the stage named as missing."""

from __future__ import annotations

from ddplab.report import stages
from ddplab.report.stage import part_of

UNITS = ("s", "bytes", "bytes/s", "samples/s", "1", "buckets", "MiB")
COMPARED = ("measured", "predicted", "ratio", "unit")


def top_level() -> tuple[str, ...]:
    """The keys report.json always has: its schema's version, then each top-level stage's."""
    return ("schema_version", *(stage.key for stage in stages.STAGES if stage.parent is None))


def compared_figures(value, path: str = ""):
    """Every ``{measured, predicted, ...}`` object in the report, with its path."""
    if isinstance(value, dict):
        if "measured" in value and "predicted" in value:
            yield path, value
            return
        for key, item in value.items():
            yield from compared_figures(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from compared_figures(item, f"{path}[{i}]")


def problems(data: dict) -> list[str]:
    """What is wrong with a report's JSON: [] when nothing is."""
    found = [f"no top-level key {key!r}" for key in top_level() if key not in data]
    for path, figure in compared_figures(data):
        if set(figure) != set(COMPARED):
            found.append(f"{path}: keys {sorted(figure)}, not {sorted(COMPARED)}")
        elif figure["unit"] not in UNITS:
            found.append(f"{path}: unit {figure['unit']!r}")
        elif figure["predicted"] and abs(figure["ratio"] - figure["measured"] /
                                         figure["predicted"]) > 1e-9 * abs(figure["ratio"]):
            found.append(f"{path}: ratio {figure['ratio']} is not measured/predicted")
    named = {m["part"] for m in data.get("missing", [])}
    for stage in stages.STAGES:
        if part_of(data, stage.key) is None and stage.key not in named:
            found.append(f"{stage.key} is empty and not named as missing")
    return found
