"""What a check's judge returns: passed, not applicable or not judged (and why), or what it
found.

A judge reads the ``Evidence`` (and the findings of the checks before it, ``earlier``) and
returns one of these; the registry (``checks.CHECKS``) adds the id, kind, book section and fix.
"""

from __future__ import annotations

import dataclasses

from ddplab.doctor.judging.findings import Status


@dataclasses.dataclass
class Problem:
    """What a judge found: the message with this run's numbers, its evidence, and the reader's
    line; the registry makes it a ``Finding`` with the check's id, section and fix."""

    message: str
    evidence: dict
    file: str | None
    line: int | None
    kind: str | None = None  # the check's kind unless said
    fix: str | None = None  # the check's fix unless said
    section: str | None = None  # the check's book section unless said (an error's own entry)


@dataclasses.dataclass
class Judgement:
    status: Status
    why: str
    problems: list = dataclasses.field(default_factory=list)


def passed(why: str) -> Judgement:
    return Judgement(Status.PASSED, why)


def not_applicable(why: str) -> Judgement:
    return Judgement(Status.NOT_APPLICABLE, why)


def not_judged(why: str) -> Judgement:
    """The check applies to the script, but this run was too short to show it either way
    (``why`` says what it needs): the report lists it, so that a clean exit is not read as a
    pass."""
    return Judgement(Status.NOT_JUDGED, why)


def found(*problems: Problem, why: str = "") -> Judgement:
    return Judgement(Status.FOUND, why or problems[0].message, list(problems))


def ranks_text(ranks) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def file_line(record) -> tuple:
    """(file, line) of a record (or of a dict with those keys), or (None, None)."""
    if record is None:
        return None, None
    if isinstance(record, dict):
        return record.get("file"), record.get("line")
    return record.file, record.line


def number(value: float) -> str:
    return f"{value:.4g}"


class Earlier:
    """What a judge may read of the checks before it: the findings of the checks its record
    names in ``defers_to``, and, where it ``reads_explanations``, every finding that explains
    the run's failure. Asking for anything else is an error that names the declaration."""

    def __init__(self, findings: list, check):
        self._findings, self._check = findings, check

    def found(self, check_id: str) -> list:
        """The findings of ``check_id``, a check this one defers to."""
        if check_id not in self._check.defers_to and self._check.defers_to != ("*",):
            raise ValueError(f"check {self._check.id!r} reads {check_id!r}'s findings: name it "
                             "in its record's defers_to")
        return [f for f in self._findings if f.id == check_id]

    def every(self) -> list:
        """Every finding before this check, for a check that defers to every one
        (``check.EVERY_CHECK_BEFORE``)."""
        if self._check.defers_to != ("*",):
            raise ValueError(f"check {self._check.id!r} reads every earlier finding: give it "
                             "defers_to=EVERY_CHECK_BEFORE in its record")
        return list(self._findings)

    def explaining(self) -> list:
        """Every earlier finding that explains the run's crash or hang."""
        if not self._check.reads_explanations:
            raise ValueError(f"check {self._check.id!r} reads which findings explain a failure: "
                             "set reads_explanations in its record")
        return [f for f in self._findings if f.explains]
