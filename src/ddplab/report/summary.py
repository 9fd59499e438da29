"""The report's summary table, from its JSON alone: each measured figure beside the model's
prediction, the ratio measured/predicted, and what is missing."""

from __future__ import annotations

from ddplab.chapters.time_cost.allreduce import human

SCALE = {"s": (1e3, "ms"), "bytes": (1e-6, "MB"), "bytes/s": (1e-9, "GB/s"),
         "samples/s": (1, "samples/s"), "1": (100, "%")}


def shown(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    factor, name = SCALE.get(unit, (1, unit))
    scaled = x * factor
    return f"{scaled:,.0f} {name}" if abs(scaled) >= 1000 else f"{scaled:.3g} {name}"


def rows(data: dict) -> list[tuple[str, dict]]:
    """``(label, {measured, predicted, ratio, unit})`` for the table, in the report's order."""
    out = []
    allreduce = data.get("allreduce") or {}
    if allreduce.get("sizes"):
        for row in (allreduce["sizes"][0], allreduce["sizes"][-1]):
            out.append((f"all-reduce of {human(row['bytes'])}", row["time"]))
    step = data.get("step") or {}
    for phase, figure in (step.get("phases") or {}).items():
        out.append((f"DDP step: {phase}", figure))
    if step:
        out.append(("DDP step: scaling efficiency", step["efficiency"]))
    buckets = data.get("buckets") or {}
    for row in buckets.get("caps") or []:
        out.append((f"step, bucket_cap_mb {row['bucket_cap_mb']:g} ({row['buckets']} buckets)",
                    row["step"]))
    for row in (buckets.get("accumulation") or {}).get("rows") or []:
        out.append((f"step of {row['micro_batches']} micro-batches, no_sync", row["no_sync"]))
    for name, row in ((data.get("memory") or {}).get("strategies") or {}).items():
        out.append((f"memory per rank, {name}", row["total"]))
    return out


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
    step = data.get("step") or {}
    if step:
        lines.append(f"measured/model step within a factor of {step['margin']:g}: "
                     f"{step['within_margin']}")
    for nodes, p in ((data.get("prediction") or {}).get("nodes") or {}).items():
        lines.append(f"PREDICTION, {nodes} nodes ({p['ranks']} ranks): step "
                     f"{shown(p['step']['predicted'], 's')}, efficiency "
                     f"{shown(p['efficiency']['predicted'], '1')}")
    for missing in data.get("missing") or []:
        lines.append(f"missing: {missing['part']}: {missing['why']}")
    if data.get("failure"):
        lines.append(f"FAILED: {data['failure']}")
    return lines
