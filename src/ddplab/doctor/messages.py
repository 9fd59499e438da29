"""What crosses a process boundary in a doctor's run: one frozen type per message, and the run
they add up to.

A rank says ``Hello`` when it joins a group, ``Done`` when its script ends (with a ``Crash``,
recorded where the exception still exists, if it failed), its ``RankEvidence`` once, ``Where``
it is when the doctor calls the roll, and an ``Alarm`` when a call has waited past the
timeout; rank 0's process says the ``Mode`` and, when it was no rank, its own ``Done`` under
the launcher's key. The doctor only sets ``Signal`` keys. Everything is JSON in the doctor's
store (``store.Store.send`` / ``read``): ``to_json`` writes a message, ``from_json`` reads it
back into the same type, refusing a field it does not know, as torch's elastic agent types
``ProcessFailure`` and ``RunProcsResult`` (``torch/distributed/elastic/multiprocessing/api.py``).

``Run`` is what the doctor's process assembles from them, the raw material of every check.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import ClassVar

import ddplab.doctor.records as records
from ddplab.doctor.records import Mode, Outcome, Word

__all__ = ["Alarm", "Crash", "Done", "Frame", "Hang", "Hello", "LauncherDone", "Mode",
           "RankEvidence", "Run", "Signal", "Waiting", "Where", "from_json", "to_json"]


class Signal(Word):
    """A key the doctor (or a rank judging in rank 0's place) sets; its value says nothing."""

    ROLLCALL = "rollcall"  # every rank not done answers ``Where``
    RELEASE = "release"  # every rank is done: the ranks may exit
    ABORT = "abort"  # under torchrun: a hang was judged, every rank ends
    JUDGE = "judge"  # under torchrun: the first to add 1 here judges


@dataclasses.dataclass(frozen=True)
class Message:
    """A message's key in the store: ``KEY``, with ``{rank}`` where each rank has its own."""

    KEY: ClassVar[str] = ""

    @classmethod
    def key(cls, rank: int | None = None) -> str:
        return cls.KEY.format(rank=rank)


@dataclasses.dataclass(frozen=True)
class Hello(Message):
    """A rank joined a group: its process (for a judge that must see it gone) and the group."""

    KEY: ClassVar[str] = "hello/{rank}"
    pid: int
    world_size: int
    host: str


@dataclasses.dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str


@dataclasses.dataclass(frozen=True)
class Crash:
    """How a script failed, recorded on the rank from the exception itself.

    ``error`` is the exception's last line as Python prints it (``FileExistsError: [Errno
    17] File exists: 'out'``), ``traceback`` the traceback without the doctor's frames,
    ``frames`` its frames, ``script_file``/``script_line`` the innermost frame in the reader's
    files, ``path`` the file an ``OSError`` names, ``exit_status`` a ``sys.exit`` status (then
    ``error`` is ``SystemExit(status)``). ``changes`` are what the doctor had changed of the
    run by then (an epoch cut to one batch, CUDA or a collective mapped, writes sent to the
    scratch folder): a crash after any is possibly the doctor's. ``rank`` is filled in by who
    reads it.
    """

    type: str
    error: str
    traceback: str
    frames: tuple[Frame, ...] = ()
    script_file: str | None = None
    script_line: int | None = None
    path: str | None = None
    exit_status: int | str | None = None
    changes: tuple[str, ...] = ()
    rank: int | None = None

    def says(self, text: str) -> bool:
        """Whether the error or its traceback contains ``text``."""
        return text in self.error or text in self.traceback

    @property
    def exited(self) -> bool:
        """The script called ``sys.exit`` with a failing status (no traceback of its own)."""
        return self.exit_status is not None


@dataclasses.dataclass(frozen=True)
class Done(Message):
    """How the script ended in one rank's process. ``records`` only from a process that failed
    before it joined a group (it has no evidence to publish)."""

    KEY: ClassVar[str] = "done/{rank}"
    outcome: Outcome
    steps: int = 0
    pid: int = 0
    why: str | None = None  # the doctor's reason for a stop
    crash: Crash | None = None
    records: dict | None = None


@dataclasses.dataclass(frozen=True)
class LauncherDone(Done):
    """How rank 0's process ended when it was no rank: the launcher of spawned ranks, or a
    script that never joined a group."""

    KEY: ClassVar[str] = "launcher"


@dataclasses.dataclass(frozen=True)
class RankEvidence(Message):
    """Everything one rank recorded (``records``: kind -> records, read back typed)."""

    KEY: ClassVar[str] = "evidence/{rank}"
    rank: int | None
    world_size: int | None
    steps: int
    host: str | None
    records: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Waiting:
    """A blocking call the main thread is in: since when, at the reader's line."""

    what: str
    since: float
    file: str | None = None
    line: int | None = None
    seq: int | None = None  # the collective's number on its group


@dataclasses.dataclass(frozen=True)
class Alarm(Message):
    """A rank's watchdog: its main thread has waited in a call for longer than the timeout."""

    KEY: ClassVar[str] = "alarm"
    rank: int
    waiting: Waiting
    waited: float


@dataclasses.dataclass(frozen=True)
class Where(Message):
    """A rank's answer to a roll call (``silent``: it did not answer)."""

    KEY: ClassVar[str] = "where/{rank}"
    rank: int
    file: str | None = None
    line: int | None = None
    inner: str = ""  # what the stuck frame is doing (``all_reduce``, ``wait``)
    waiting: Waiting | None = None
    evidence: RankEvidence | None = None
    now: float = 0.0
    silent: bool = False


@dataclasses.dataclass(frozen=True)
class Hang:
    """The alarm (None: a roll call after a crash) and where every rank not done was."""

    alarm: Alarm | None
    positions: dict = dataclasses.field(default_factory=dict)  # rank -> Where


@dataclasses.dataclass
class Run:
    """What the ranks reported: the raw material of every check."""

    mode: Mode | None = None
    world_size: int | None = None
    evidence: dict = dataclasses.field(default_factory=dict)  # rank -> RankEvidence
    outcomes: dict = dataclasses.field(default_factory=dict)  # rank -> Done
    launcher: LauncherDone | None = None
    hang: Hang | None = None
    output: dict = dataclasses.field(default_factory=dict)  # process name -> output tail
    seconds: float = 0.0


MESSAGES = (Hello, Done, LauncherDone, RankEvidence, Alarm, Where)


def to_json(message) -> dict:
    """A message as plain JSON values (records as ``records.dump`` writes them)."""
    fields = {}
    for field in dataclasses.fields(message):
        value = getattr(message, field.name)
        if field.name == "records" and value is not None:
            value = records.dump(value)
        elif dataclasses.is_dataclass(value):
            value = to_json(value)
        elif isinstance(value, tuple):
            value = [to_json(v) if dataclasses.is_dataclass(v) else v for v in value]
        elif isinstance(value, dict):
            value = {k: to_json(v) if dataclasses.is_dataclass(v) else v
                     for k, v in value.items()}
        fields[field.name] = value
    return fields


def from_json(cls, data: dict):
    """``to_json``'s inverse: the message of type ``cls``; a field it does not have is an error
    that names the ones it has."""
    hints = typing.get_type_hints(cls)
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"a {cls.__name__} message has no field {', '.join(unknown)}; its "
                         f"fields are {', '.join(sorted(known))}")
    return cls(**{name: _decode(hints[name], value, name) for name, value in data.items()})


def _decode(hint, value, name: str):
    if value is None:
        return None
    if name == "records":
        return records.load(value)
    options = [h for h in typing.get_args(hint) if h is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = options[0] if len(options) == 1 else None
    if hint is None:
        return value
    if dataclasses.is_dataclass(hint):
        return from_json(hint, value)
    if isinstance(hint, type) and issubclass(hint, Word):
        return hint(value)
    if typing.get_origin(hint) is tuple:
        part = typing.get_args(hint)[0]
        return tuple(from_json(part, v) if dataclasses.is_dataclass(part) else v for v in value)
    return value
