"""What every record shares: the stamp the recorder gives it, and the few words a record's
field may hold (``Word``: a str enum that prints and encodes as its word)."""

from __future__ import annotations

import dataclasses
import enum
from typing import ClassVar


class Word(str, enum.Enum):
    """A value that is one of a few words: equal to its word, printed and sent as JSON as it
    (Python 3.11's ``enum.StrEnum``, written out for the 3.10 that torch 2.11 still runs on)."""

    def __str__(self) -> str:
        return self.value


class Mode(Word):
    """What the script turned out to be, as rank 0's process says it (the store's ``mode``)."""

    RANKS = "ranks"  # it joins a group itself, as torchrun's ranks do: every process runs it
    SPAWN = "spawn"  # it starts its own rank processes: rank 0's process is their launcher
    NONE = "none"  # it neither joined a group nor started ranks


class DdpCall(Word):
    """A collective DDP, or a SyncBatchNorm in the model, issues itself (``Collective.by``),
    as the report names it."""

    SHAPE_CHECK = "DDP's check of the parameters' shapes"
    PARAMETERS = "DDP's broadcast of rank 0's parameters"
    BUFFERS = "DDP's broadcast of rank 0's buffers before a forward"
    GRADIENTS = "DDP's all-reduce of the gradients"
    SYNC_BATCHNORM = "SyncBatchNorm's all-reduce of its batch statistics"


class Outcome(Word):
    """How the script ended in one process."""

    FINISHED = "finished"  # it ran to its end
    STOPPED = "stopped"  # the doctor stopped it (the K-th optimizer step, a third epoch)
    CRASHED = "crashed"  # an exception, or a non-zero exit status


@dataclasses.dataclass(frozen=True, kw_only=True)
class Record:
    """Stamped by the recorder: ``step`` is the number of optimizer steps this process had
    taken when it saw the call, ``t`` the order of everything this process saw (0, 1, ...).
    ``PARTS`` names the fields that hold a list of smaller frozen records, and their type."""

    KIND: ClassVar[str] = ""
    PARTS: ClassVar[dict] = {}
    step: int = 0
    t: int = 0

    def __init_subclass__(cls, **kwargs):
        """A kind registers itself by being defined (``KINDS``): a new kind is one class."""
        super().__init_subclass__(**kwargs)
        if cls.KIND:
            if KINDS.get(cls.KIND, cls) is not cls:
                raise ValueError(f"two record kinds are named {cls.KIND!r}")
            KINDS[cls.KIND] = cls


KINDS: dict[str, type] = {}  # kind -> its record type, filled as the family modules load


@dataclasses.dataclass(frozen=True, kw_only=True)
class Located(Record):
    """A record of a call made at a line: ``file`` and ``line`` are the reader's line that made
    it (``ranks/where.py``), or None where no line of the reader's is on the stack."""

    file: str | None = None
    line: int | None = None
