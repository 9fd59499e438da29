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
``gathered``, ``seeds``, ``prints``, ``machine``): a kind is registered by its class being
defined (``base.Record.__init_subclass__``), every family module is loaded here, and every kind
is reachable as ``records.Kind``, with nothing listed by hand. The package imports nothing of
ddplab but itself: rank-side code and judging both stand on it.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

from ddplab.doctor.records.base import KINDS, DdpCall, Mode, Outcome, Record, Word

for _family in pkgutil.iter_modules(__path__):  # every family module, each kind registering
    importlib.import_module(f"{__name__}.{_family.name}")
_TYPES = {t.__name__: t for kind in KINDS.values() for t in (kind, *kind.PARTS.values())}
globals().update(_TYPES)  # records.Pass, records.MicroStep (a part of a Step), ...
__all__ = ["DdpCall", "Mode", "Outcome", "Record", "Word", "KINDS", "dump", "from_json", "load",
           "to_json", *_TYPES]


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
