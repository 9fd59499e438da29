"""What the reference run gives the judge: the comparison and the one process's own evidence
(its printed lines), or why there was none."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Outcome:
    comparison: object | None = None  # ``compare.Comparison``
    evidence: object | None = None  # the one process's ``Evidence``
    plan: dict | None = None
    skipped: str | None = None  # why no comparison was made
    seconds: float = 0.0
