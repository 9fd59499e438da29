"""A check, as one record: its id, its kind, what it checks, the book's section that shows the
pitfall, the fix as code, its judge, what it may read of the checks before it, and which
failures its finding explains. Each record stands in its judge's module, beside the judge and
its texts (pylint's checkers keep a message beside the code that emits it); ``checks.CHECKS``
lists them in the report's order.

The book's address of a section is derived from its label: ``<page>.html#<label>``, the page
being the one of ``PAGES`` whose name (hyphenated) starts the label (``time-cost-slower``:
``time_cost``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ddplab.common.home import book
from ddplab.doctor.judging.findings import KINDS

PAGES = ("averaging", "time_cost", "sharding", "hangs", "errors", "training_loop",
         "lr_scaling", "running")  # the book's pages a finding may send a reader to


def page_of(label: str) -> str:
    """The page whose section ``label`` is (a ValueError naming the pages if none)."""
    for page in sorted(PAGES, key=len, reverse=True):
        word = page.replace("_", "-")
        if label == word or label.startswith(word + "-"):
            return page
    raise ValueError(f"the label {label!r} starts with none of the pages {', '.join(PAGES)}")


def url_of(label: str) -> str:
    # Sphinx gives a label's target its own id, so the label is the anchor: a heading
    # reworded keeps it (a heading's own slug would change, and differs from GitHub's)
    return f"{book()}{page_of(label)}.html#{label}"


@dataclasses.dataclass(frozen=True)
class Crashes:
    """The failures a check's finding explains: any crash, or one whose exception type is one
    of ``types`` or whose message or traceback says one of ``texts``."""

    any: bool = False
    types: tuple[str, ...] = ()
    texts: tuple[str, ...] = ()

    def match(self, crash) -> bool:
        return crash is not None and (self.any or crash.type in self.types
                                      or any(crash.says(text) for text in self.texts))


ANY_CRASH = Crashes(any=True)
NO_CRASH = Crashes()
EVERY_CHECK_BEFORE = ("*",)  # defers_to of a check that weighs every finding before it


@dataclasses.dataclass(frozen=True)
class Check:
    """``judge(evidence, earlier)`` returns a ``judgement.Judgement``; ``earlier`` gives it the
    findings of the checks named in ``defers_to`` only, and, with ``reads_explanations``, every
    earlier finding that explains the run's crash or hang."""

    id: str
    kind: str  # of its findings, unless a finding says otherwise: one of findings.KINDS
    checks: str  # what it checks, in a sentence
    section: str  # the label of the book's section that shows the pitfall
    fix: str  # the change, as code
    judge: Callable
    defers_to: tuple[str, ...] = ()  # checks before it whose findings it reads (or every one)
    reads_explanations: bool = False  # it reads which earlier findings explain a failure
    explains_hang: bool = False  # its finding, if any, is why a run hung
    explains: Crashes = NO_CRASH  # the crashes its finding, if any, explains
    also: tuple[str, ...] = ()  # the other kinds a finding of it may have

    def __post_init__(self):
        wrong = [k for k in (self.kind, *self.also) if k not in KINDS]
        if wrong:
            raise ValueError(f"check {self.id}: kind {wrong[0]!r} is none of {KINDS}")
        page_of(self.section)

    @property
    def kinds(self) -> str:
        """Its kinds in words: ``error``, ``error or waste``."""
        return " or ".join((self.kind, *self.also))

    @property
    def url(self) -> str:
        return url_of(self.section)
