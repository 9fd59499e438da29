"""What a check's judge returns: passed, not applicable (and why), or what it found.

A judge reads the ``Evidence`` (and the findings of the checks before it, ``so_far``) and
returns one of these; the registry (``checks.CHECKS``) adds the id, kind, book section and fix.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Draft:
    message: str
    evidence: dict
    file: str | None
    line: int | None
    kind: str | None = None  # the check's kind unless said
    fix: str | None = None  # the check's fix unless said


@dataclasses.dataclass
class Judgement:
    status: str  # "passed", "not applicable", "found"
    why: str
    drafts: list = dataclasses.field(default_factory=list)


def passed(why: str) -> Judgement:
    return Judgement("passed", why)


def not_applicable(why: str) -> Judgement:
    return Judgement("not applicable", why)


def found(*drafts: Draft, why: str = "") -> Judgement:
    return Judgement("found", why or drafts[0].message, list(drafts))


def ranks_text(ranks) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def spot(record: dict) -> tuple:
    return record.get("file"), record.get("line")


def number(value: float) -> str:
    return f"{value:.4g}"
