"""What a watcher writes on a rank and a judge reads in the doctor's process: one frozen type
per kind of record.

A watcher builds the record it saw (``RECORDER.add(records.Pass(...))``): a field it does not
know is refused there, by the type's constructor. The recorder stamps ``step`` and ``t`` and
keeps the records by kind; ``dump`` turns them into JSON for the doctor's store, and ``load``
turns them back into the same types for the judges, refusing a kind or a field it does not
know. A record that changes while the script runs (a pass over a loader, a collective whose
result comes later) is replaced by a new one (``Recorder.update``), never changed in place.

Every field is plain JSON (numbers, strings, lists, dicts), so that a record read back is
equal to the one written. ``file`` and ``line`` are always the reader's line that made the
call (``ranks/where.py``), or None where no line of the reader's is on the stack.

The kinds live one family a module, beside the watcher that writes them (``group``,
``collectives``, ``amp``, ``files``, ``data``, ``model``, ``steps``, ``schedules``,
``gathered``, ``seeds``, ``prints``, ``machine``), and every one is reachable here as
``records.Kind``. The package imports nothing of ddplab but itself: rank-side code and
judging both stand on it.
"""

from __future__ import annotations

import dataclasses

from ddplab.doctor.records.amp import Clip
from ddplab.doctor.records.base import DdpCall, Mode, Outcome, Record, Word
from ddplab.doctor.records.collectives import Collective
from ddplab.doctor.records.data import IterableCount, Loader, Pass, SamplerOrder, SetEpoch
from ddplab.doctor.records.files import Write
from ddplab.doctor.records.gathered import GatheredUse
from ddplab.doctor.records.group import DuplicateRank, GroupDestroy, GroupInit, WorldSizeRead
from ddplab.doctor.records.machine import CudaOnCpu, LocalRankOption, Mapped, Trackers
from ddplab.doctor.records.model import Ddp, LoadStateDict, Root, Unused
from ddplab.doctor.records.prints import Printed
from ddplab.doctor.records.schedules import Schedule
from ddplab.doctor.records.seeds import Seed
from ddplab.doctor.records.steps import Backward, MicroStep, Optimizer, Replica, Step

__all__ = [
    "DdpCall", "Mode", "Outcome", "Record", "Word", "GroupInit", "GroupDestroy",
    "DuplicateRank", "WorldSizeRead", "Collective", "Clip", "Write", "Loader", "Pass",
    "IterableCount",
    "SamplerOrder", "SetEpoch", "Ddp", "Root", "Unused", "LoadStateDict", "Optimizer",
    "MicroStep", "Backward", "Step", "Replica", "GatheredUse", "Seed", "Printed", "CudaOnCpu",
    "Mapped", "Trackers", "LocalRankOption", "Schedule", "KINDS", "dump", "from_json", "load",
    "to_json",
]

KINDS: dict[str, type[Record]] = {kind.KIND: kind for kind in (
    GroupInit, GroupDestroy, DuplicateRank, WorldSizeRead, Collective, Clip, Write, Loader,
    Pass, SamplerOrder, SetEpoch, Ddp, Root, Unused, LoadStateDict, Optimizer, Step, Replica,
    CudaOnCpu, Mapped, Trackers, LocalRankOption, GatheredUse, Seed, Printed, Schedule,
    IterableCount)}


def to_json(record: Record) -> dict:
    """The record's fields (and its parts' fields) as a dict of plain JSON values."""
    return dataclasses.asdict(record)


def from_json(kind: str, fields: dict) -> Record:
    """The record of ``kind`` with ``fields``; a kind or a field the doctor does not know is
    an error that names the ones it knows."""
    if kind not in KINDS:
        raise ValueError(f"no record kind {kind!r}; the kinds are {', '.join(sorted(KINDS))}")
    cls = KINDS[kind]
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"a {kind!r} record has no field {', '.join(unknown)}; its fields are "
                         f"{', '.join(sorted(known))}")
    parts = {name: [_part(kind, part, item) for item in fields[name]]
             for name, part in cls.PARTS.items() if fields.get(name) is not None}
    return cls(**dict(fields, **parts))


def _part(kind: str, part: type, fields: dict):
    known = {field.name for field in dataclasses.fields(part)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"a {kind!r} record's {part.__name__} has no field "
                         f"{', '.join(unknown)}; its fields are {', '.join(sorted(known))}")
    return part(**fields)


def dump(by_kind: dict[str, list]) -> dict[str, list]:
    """kind -> records, as JSON."""
    return {kind: [to_json(r) for r in found] for kind, found in by_kind.items()}


def load(by_kind: dict[str, list]) -> dict[str, list]:
    """kind -> records, from JSON (``dump``'s inverse)."""
    return {kind: [from_json(kind, fields) for fields in found]
            for kind, found in by_kind.items()}
