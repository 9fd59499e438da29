"""One stage of the report as a record: what it measures, where its part of ``report.json`` goes,
what it needs from earlier stages, and how the page and the summary show it. The stages are
registered in one tuple, ``stages.STAGES``, in the order they run; the driver (``build.py``), the
schema, the page and the summary loop over it, so a stage is added by one record there.

    Stage(name="allreduce", key="allreduce", what="all-reduce against message size",
          measure=measure,             # measure(settings, machine=<the machine's Section>)
          needs=("machine",),          # earlier stages, by name: measure's other arguments
          title="All-reduce against message size", about="...", book="time_cost.md#...",
          figures=figures,             # figures(section) -> [matplotlib Figure]
          rows=rows,                   # rows(part of the JSON) -> [(label, compared figure)]
          verdicts=verdicts, table=table)
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import NamedTuple

NEEDS_RANKS = "needs at least 2 ranks: run with --world-size 2 or more (or torchrun)"


@dataclasses.dataclass
class Section:
    """What one stage measured. ``data`` is its part of report.json: each figure the model
    predicts as ``{measured, predicted, ratio, unit}`` (``figures.compared``), ``{"missing":
    why}`` where the stage cannot run here. A stage's subclass adds, typed, what its figures
    and later stages use (the chapters' results, the calibrated model)."""

    data: dict

    @property
    def missing(self) -> str | None:
        return self.data.get("missing")


class Table(NamedTuple):
    """A table the page shows in a stage's section, above its figures."""

    head: tuple
    body: list
    note: str = ""  # shown above it, marked (a prediction says it is one)


def nothing(_) -> list:
    return []


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str  # what later stages name in ``needs``; in the failure message
    key: str  # its place in report.json; "buckets.accumulation" lies inside "buckets"'s part
    what: str  # what it measures: the progress line, the failure and the missing list
    measure: Callable[..., Section]  # measure(settings, **{each need: that stage's Section})
    needs: tuple[str, ...] = ()  # earlier stages whose sections ``measure`` takes, by name
    # the page: a section of its own for a top-level key (title, what it shows, the book's
    # section that explains it); a nested key's figures join its parent's section
    title: str | None = None
    about: str = ""
    book: str = ""  # a page of book/, with its anchor
    figures: Callable[[Section], list] = nothing  # matplotlib figures (the page only)
    table: Callable[[dict], Table | None] | None = None  # from its part of the JSON
    # the summary, from its part of the JSON alone (a report.json read back works too)
    rows: Callable[[dict], list[tuple[str, dict]]] = nothing  # (label, compared figure)
    verdicts: Callable[[dict], list[str]] = nothing  # lines after the summary's table

    @property
    def parent(self) -> str | None:
        """The key whose part this stage's lies in; None for a top-level key."""
        return self.key.rpartition(".")[0] or None


def part_of(data: dict, key: str):
    """The part of report.json at a (dotted) key; None where it is not there."""
    for name in key.split("."):
        data = data.get(name) if isinstance(data, dict) else None
    return data


def check(stages) -> tuple[Stage, ...]:
    """The registry, or a ValueError saying what in it breaks the rules: names and keys
    unique, every need an earlier stage and exactly ``measure``'s arguments after the
    settings, a nested key inside an earlier stage's part, a title for every top-level part
    and none for a nested one."""
    stages = tuple(stages)
    seen_names, seen_keys = [], []
    for stage in stages:
        if stage.name in seen_names or stage.key in seen_keys:
            raise ValueError(f"stage {stage.name!r}: its name or key {stage.key!r} is taken")
        later = [need for need in stage.needs if need not in seen_names]
        if later:
            raise ValueError(f"stage {stage.name!r} needs {later}: not an earlier stage")
        arguments = list(inspect.signature(stage.measure).parameters)[1:]
        if arguments != list(stage.needs):
            raise ValueError(f"stage {stage.name!r}: measure takes {arguments} after the "
                             f"settings, its needs are {list(stage.needs)}")
        if stage.parent is not None and stage.parent not in seen_keys:
            raise ValueError(f"stage {stage.name!r}: key {stage.key!r} lies in no earlier "
                             f"stage's part")
        if (stage.title is None) != (stage.parent is not None) or (
                stage.title and not (stage.about and stage.book)):
            raise ValueError(f"stage {stage.name!r}: a top-level part has a title, an about "
                             f"and a book section; a nested one none")
        seen_names.append(stage.name)
        seen_keys.append(stage.key)
    return stages
