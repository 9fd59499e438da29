"""Whether a reference run can be made after an N-rank run, and what it is told (``plan.json``):
the world size and steps to replay, how many micro-steps per optimizer step the one-process
script takes (the probe's count where the script reads the world size before its first step:
nanoGPT's accumulation divided by it; else the N ranks' own), and each replayed loader's
length on rank 0 (the one process's ``len(loader)`` is that times its micro-steps per step
over the ranks': its epoch has as many steps as theirs, whatever batch size it asked for)."""

from __future__ import annotations

import os

import ddplab.doctor.records as records
from ddplab.doctor.reference import layout


def _micro(steps: list) -> int | None:
    first = next((s for s in steps if s.micro_count), None)
    return first.micro_count if first is not None else None


def why_not(evidence, folder: str) -> str | None:
    """Why no reference run is made after this run (None: one is)."""
    if evidence.run.mode != records.Mode.RANKS or (evidence.world_size or 0) < 2:
        return "the script did not run as N ranks that join one group"
    if evidence.hung() or evidence.crashed() is not None:
        return "the N-rank run did not end normally"
    if evidence.steps_run() == 0:
        return "the N-rank run took no optimizer step"
    notes = layout.read_json(layout.path(folder, layout.RUN, "notes", None, 0), {})
    if "unrecorded" in notes:
        return notes["unrecorded"]
    first = layout.path(folder, layout.RUN, "batches", 1, 0)
    if not os.path.exists(first) or not layout.load(first):
        return ("the script's training batches do not come from a DataLoader, so the one "
                "process cannot be fed the same samples")
    if not os.path.exists(layout.init_path(folder)):
        return "the model is not trained through DistributedDataParallel"
    return None


def write(evidence, folder: str) -> dict:
    probe = evidence.probe
    micro = _micro(probe.records(records.Step)) if probe is not None else None
    ranks_micro = _micro(evidence.records(records.Step))
    lens = {}
    for p in evidence.training_passes(0):
        lens.setdefault(str(p.loader), p.len)
    plan = {"world_size": evidence.world_size, "steps": evidence.steps_run(),
            "micro": micro or ranks_micro, "micro_from": "probe" if micro else "ranks",
            "ranks_micro": ranks_micro, "lens": lens}
    layout.write_json(plan, os.path.join(folder, layout.PLAN))
    return plan
