"""The lines rank 0 printed against the lines the one process printed, matched line by line:
the j-th line printed by a line of the script in one run against the j-th it printed in the
other, number by number.

Two printed numbers are equal when they differ by no more than one unit of the last digit
either shows (both runs' values are within float rounding of each other, and one digit may
round the other way). A number beside a clock's unit or word (``3.2s``, ``12 ms``, ``time``,
``mfu``, ``it/s``, ``eta``) is not compared: a clock differs between any two runs. An integer
that differs is kept apart (``counts``): a count of samples or batches is a rank's share by
design. The ratio (ranks' over one process's) names the usual causes: 1/N a sum of one rank's
share, or a mean divided by the world size twice; N a sum over the ranks left undivided.
"""

from __future__ import annotations

import dataclasses
import math
import re

import ddplab.doctor.records as records

NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.])")
CLOCK_WORDS = re.compile(r"\b(time|took|elapsed|eta|mfu|throughput|speed|sec|seconds|"
                         r"samples/s|tokens/s|it/s|/s)\b", re.IGNORECASE)
CLOCK_UNIT = re.compile(r"^\s*(s|ms|sec|secs|seconds|min|h|it/s|samples/s|tokens/s)\b")


@dataclasses.dataclass(frozen=True)
class PrintedDiff:
    step: int
    file: str | None
    line: int | None
    ranks_text: str
    one_text: str
    ranks_value: float
    one_value: float
    integer: bool

    @property
    def ratio(self) -> float | None:
        return self.ranks_value / self.one_value if self.one_value else None


@dataclasses.dataclass
class PrintedComparison:
    lines: int = 0  # line pairs compared
    numbers: int = 0  # numbers compared in them
    diffs: list = dataclasses.field(default_factory=list)
    unmatched: int = 0  # lines one run printed more often than the other


def numbers_of(text: str) -> list[tuple[str, float]]:
    """The numbers of a printed line that a second run should repeat (no clock's)."""
    if CLOCK_WORDS.search(text) and not re.search(r"loss|acc", text, re.IGNORECASE):
        return []
    found = []
    for m in NUMBER.finditer(text):
        if CLOCK_UNIT.match(text[m.end():]):
            continue
        try:
            found.append((m.group(), float(m.group())))
        except ValueError:
            continue
    return found


def _unit(shown: str) -> float:
    mantissa, _, exponent = shown.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 10.0 ** (-decimals + (int(exponent) if exponent else 0))


def equal(a: str, b: str) -> bool:
    x, y = float(a), float(b)
    if x == y:
        return True
    if not (math.isfinite(x) and math.isfinite(y)):
        return False
    return abs(x - y) <= max(_unit(a), _unit(b)) * 1.0001


def compare(ranks_lines: list, one_lines: list) -> PrintedComparison:
    """Rank 0's ``Printed`` records against the one process's."""
    result = PrintedComparison()
    by_line: dict = {}
    for p in one_lines:
        by_line.setdefault((p.file, p.line), []).append(p)
    seen: dict = {}
    for p in ranks_lines:
        key = (p.file, p.line)
        j = seen.get(key, 0)
        seen[key] = j + 1
        others = by_line.get(key, [])
        if j >= len(others):
            result.unmatched += 1
            continue
        q = others[j]
        mine, theirs = numbers_of(p.text), numbers_of(q.text)
        if len(mine) != len(theirs):
            result.unmatched += 1
            continue
        result.lines += 1
        for (a, x), (b, y) in zip(mine, theirs):
            result.numbers += 1
            if not equal(a, b):
                result.diffs.append(PrintedDiff(
                    p.step, p.file, p.line, p.text, q.text, x, y,
                    integer="." not in a + b and "e" not in (a + b).lower()))
    result.unmatched += sum(max(0, len(v) - seen.get(k, 0)) for k, v in by_line.items())
    return result


def own_loss(value: float, shown: str, steps: list, step: int) -> bool:
    """Whether ``value`` (printed after ``step`` optimizer steps) is the loss this process gave
    to backward in that step or the next one (a line printed before ``optimizer.step()``)."""
    for s in steps:
        if s.number in (step, step + 1):
            if any(b.value is not None and abs(b.value - value) <= _unit(shown)
                   for b in s.backwards):
                return True
    return False


def ratio_words(ratio: float | None, world_size: int) -> str:
    """What a ratio of the ranks' number to one process's usually means."""
    if ratio is None:
        return "the one process printed 0"
    n = world_size
    if math.isclose(ratio, 1 / n, rel_tol=2e-3):
        return (f"1/{n}: one rank's share of a sum over all the data, or a mean divided by "
                f"the world size once too often")
    if math.isclose(ratio, n, rel_tol=2e-3):
        return f"{n}: a sum over the {n} ranks, not divided by the world size"
    return f"{ratio:.4g}: not a multiple of the world size; computed on other samples"


def lines_of(evidence, rank: int = 0) -> list:
    """The lines ``rank`` printed while both runs trained on the same samples: none after a
    step the doctor does not count (there each run trains on its own loader's one batch)."""
    if evidence is None:
        return []
    return [p for p in evidence.records(records.Printed, rank) if not p.after_drained]
