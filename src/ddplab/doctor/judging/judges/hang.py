"""``hang``: a rank waited longer than the timeout, and no other check explains why: where
every rank is, said from the roll call."""

from __future__ import annotations

import ddplab.doctor.records as records
from ddplab.doctor.judging.check import Check
from ddplab.doctor.judging.findings import place
from ddplab.doctor.judging.judgement import (
    Problem,
    found,
    passed,
)
from ddplab.doctor.messages import to_json


def hang(evidence, earlier):
    """A rank waited longer than the timeout, and no other check explains why."""
    if not evidence.hung():
        return passed("no rank waited longer than the timeout")
    explained = earlier.explaining()
    if explained:
        return passed(f"the hang is {explained[0].id}'s")
    hung = evidence.run.hang
    waiting = hung.alarm.waiting
    return found(Problem(describe_hang(evidence, hung.alarm, hung.positions),
                         to_json(hung), waiting.file, waiting.line))


def describe_hang(evidence, alarm, positions: dict) -> str:
    """Where each rank is (``positions``: rank -> ``messages.Where``): waiting in which call
    at which line, or done."""
    waiting = alarm.waiting
    parts = [f"rank {alarm.rank} waits in {waiting.what}"
             + (f" #{waiting.seq + 1}" if waiting.seq is not None else "")
             + (f" at {place(waiting.file, waiting.line)}" if waiting.line else "")
             + (f" (for {alarm.waited:.0f} s)" if alarm.waited else "")]
    ended = {records.Outcome.FINISHED: "has finished the script",
             records.Outcome.CRASHED: "has crashed",
             records.Outcome.STOPPED: "was stopped by the doctor"}
    for rank in sorted(evidence.run.outcomes):
        if rank != alarm.rank:
            done = evidence.run.outcomes[rank]
            parts.append(f"rank {rank} {ended[done.outcome]} (after {done.steps} optimizer "
                         "steps)")
    for rank, p in sorted(positions.items()):
        if rank == alarm.rank:
            continue
        if p.silent:
            parts.append(f"rank {rank} did not answer (busy outside Python)")
        elif p.waiting:
            parts.append(f"rank {rank} waits in {p.waiting.what}"
                         + (f" at {place(p.waiting.file, p.waiting.line)}" if p.waiting.line
                            else ""))
        else:
            parts.append(f"rank {rank} is at {place(p.file, p.line)}"
                         + (f" (in {p.inner})" if p.inner else ""))
    return "; ".join(parts)


FIX_HANG = """\
# every rank must call the same collectives in the same order: move the collective
# out of any `if rank == ...` branch, and give every rank the same number of batches"""


HANG = Check(
    "hang", "error",
    "no rank waits longer than the timeout in a collective, a backward or DDP's "
    "construction",
    "hangs",
    FIX_HANG, hang, reads_explanations=True)
