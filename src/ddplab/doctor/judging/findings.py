"""What the doctor says: a finding (a mistake, with its numbers, its line and its fix), each
check's verdict, and the whole diagnosis (text, JSON, exit status)."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import os

from ddplab.doctor.messages import Crash, Hang, to_json
from ddplab.doctor.records import Word

SCHEMA_VERSION = 1


class Kind(Word):
    """What a finding is."""

    ERROR = "error"  # a wrong result, a crash or a hang
    WASTE = "waste"  # slower, or more memory, than it needs
    ADVISORY = "advisory"  # a note: what the doctor suspects but cannot prove


class RunOutcome(Word):
    """How the whole run ended, as the report's last line says it."""

    FINISHED = "finished"
    STOPPED = "stopped"  # the doctor stopped every rank at the same step
    HANG = "hang"
    CRASHED = "crashed"
    NO_GROUP = "no group"  # the script never joined a group nor started ranks


KINDS = tuple(Kind)
ROOT = contextvars.ContextVar("root", default=None)  # the folder paths are shown from


def shown_path(path: str | None) -> str | None:
    """A path as a linter shows it: relative to the folder the script ran in (the current
    folder, for the command line) when inside it."""
    if not path:
        return path
    relative = os.path.relpath(path, ROOT.get() or os.getcwd())
    return path if relative.startswith("..") else relative


def paths_from_root(render):
    """``render(diagnosis)`` with paths shown from the folder the script ran in."""
    @functools.wraps(render)
    def rendered(diagnosis, *args, **kwargs):
        with shown_from(diagnosis.root):
            return render(diagnosis, *args, **kwargs)
    return rendered


@contextlib.contextmanager
def shown_from(folder: str | None):
    """Paths inside the block are shown relative to ``folder``."""
    token = ROOT.set(folder)
    try:
        yield
    finally:
        ROOT.reset(token)


def place(file: str | None, line: int | None) -> str:
    return f"{shown_path(file)}:{line}" if file else "?"


@dataclasses.dataclass
class Finding:
    id: str
    kind: str
    message: str
    evidence: dict
    file: str | None
    line: int | None
    section: str  # the book's label, e.g. "sharding-shuffling"
    url: str
    fix: str
    explains: bool = False  # it is why the run hung or crashed

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["file"] = shown_path(self.file)
        return data


class Status(Word):
    """How a check came out on this run (shown and written as its value)."""

    PASSED = "passed"
    NOT_APPLICABLE = "not applicable"  # the run had nothing to check (and the why says so)
    NOT_JUDGED = "not judged"  # it applies, but this run was too short to show it (the why)
    FOUND = "found"


@dataclasses.dataclass
class Verdict:
    """One check on this run: ``passed``, ``not applicable``, ``not judged`` (this run could
    not show it either way) or ``found`` (with findings)."""

    id: str
    kind: str
    status: Status
    why: str
    findings: list = dataclasses.field(default_factory=list)

    def to_json(self) -> dict:
        return {"id": self.id, "kind": self.kind, "status": str(self.status), "why": self.why}


@dataclasses.dataclass
class Diagnosis:
    script: str
    world_size: int | None
    backend_requested: str | None
    backend_used: str | None
    steps_run: int
    outcome: RunOutcome
    checks: list
    crash: Crash | None = None
    crash_explained: bool = False  # a finding says why it crashed
    hang: Hang | None = None
    seconds: float = 0.0
    output: dict = dataclasses.field(default_factory=dict)
    root: str | None = None  # the folder the script ran in: paths are shown from there
    mapped: dict | None = None  # the script's CUDA run on the CPU: {"gpus", "ranks", "calls"}
    writes: dict = dataclasses.field(default_factory=dict)  # rank -> paths it would have written
    trackers: dict | None = None  # {"modules", "settings"}: trackers kept from recording

    @property
    def findings(self) -> list:
        return [f for verdict in self.checks for f in verdict.findings]

    def errors(self) -> list:
        return [f for f in self.findings if f.kind == "error"]

    def not_judged(self) -> list:
        """The checks that apply to the script but that this run could not judge."""
        return [v for v in self.checks if v.status == Status.NOT_JUDGED]

    def unexplained_crash(self) -> Crash | None:
        """The crash, where no finding explains it (the script failed on its own)."""
        return None if self.crash_explained else self.crash

    def exit_code(self) -> int:
        """0: no error; 1: an error found (a script that ran without joining a process group
        too); 2: the script failed on its own (no check explains it)."""
        if self.unexplained_crash() is not None:
            return 2
        return 1 if self.errors() else 0

    @paths_from_root
    def to_json(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "script": shown_path(self.script),
                "world_size": self.world_size, "backend_requested": self.backend_requested,
                "backend_used": self.backend_used, "steps_run": self.steps_run,
                "outcome": self.outcome, "exit_code": self.exit_code(),
                "checks": [v.to_json() for v in self.checks],
                "not_judged": [{"id": v.id, "why": v.why} for v in self.not_judged()],
                "findings": [f.to_json() for f in self.findings],
                "crash": self.crash and dict(to_json(self.crash), explained=self.crash_explained),
                "hang": self.hang and to_json(self.hang), "seconds": round(self.seconds, 2),
                "writes": {rank: [shown_path(p) for p in paths]
                           for rank, paths in self.writes.items()},
                "trackers": self.trackers,
                "mapped": self.mapped and dict(self.mapped, calls=[
                    dict(c, file=shown_path(c["file"])) for c in self.mapped["calls"]])}
