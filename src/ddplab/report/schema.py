"""What ``report.json`` must hold, checked by the tests and by CI's runs of the command."""

from __future__ import annotations

TOP_LEVEL = ("schema_version", "machine", "allreduce", "step", "buckets", "memory",
             "prediction")
UNITS = ("s", "bytes", "bytes/s", "samples/s", "1", "buckets", "MiB")
COMPARED = ("measured", "predicted", "ratio", "unit")


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
    found = [f"no top-level key {key!r}" for key in TOP_LEVEL if key not in data]
    for path, figure in compared_figures(data):
        if set(figure) != set(COMPARED):
            found.append(f"{path}: keys {sorted(figure)}, not {sorted(COMPARED)}")
        elif figure["unit"] not in UNITS:
            found.append(f"{path}: unit {figure['unit']!r}")
        elif figure["predicted"] and abs(figure["ratio"] - figure["measured"] /
                                         figure["predicted"]) > 1e-9 * abs(figure["ratio"]):
            found.append(f"{path}: ratio {figure['ratio']} is not measured/predicted")
    for section in TOP_LEVEL[1:]:
        if data.get(section) is None and not any(
                m["part"].split(".")[0] == section for m in data.get("missing", [])):
            found.append(f"{section} is empty and not named as missing")
    return found
