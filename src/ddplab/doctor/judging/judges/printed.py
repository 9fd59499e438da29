"""``logged-sum-not-divided``: a rank prints the SUM an all-reduce gave of the ranks' means
(a loss, an accuracy) as if it were their mean.

The proof is the run's own numbers: each rank's value before the all-reduce (not a whole
number: a mean), the sum after it, and a later printed line on the same rank that shows the
sum, not the sum divided by the world size.
"""

from __future__ import annotations

import re

import ddplab.doctor.records as records
from ddplab.doctor.judging.findings import place
from ddplab.doctor.judging.judgement import (
    Problem,
    file_line,
    found,
    not_applicable,
    number,
    passed,
)

FLOAT = re.compile(r"-?\d+\.(\d+)")


def _shows(text: str, value: float) -> bool:
    """Whether ``text`` prints ``value`` rounded to the decimals it shows (at least two)."""
    for match in FLOAT.finditer(text):
        decimals = len(match.group(1))
        if decimals >= 2 and abs(float(match.group(0)) - value) <= 0.5 * 10 ** -decimals:
            return True
    return False


def logged_sum_not_divided(evidence, earlier):
    size = evidence.world_size or 0
    if size < 2:
        return not_applicable("one rank")
    per_rank = {r: [c for c in evidence.records(records.Collective, r)
                    if c.op == "all_reduce" and not c.by and not c.p2p] for r in evidence.ranks}
    if len({len(v) for v in per_rank.values()}) != 1 or not per_rank[evidence.ranks[0]]:
        return not_applicable("no all-reduce the ranks called alike")
    base = evidence.ranks[0]
    printed = evidence.records(records.Printed, base)
    for i, c in enumerate(per_rank[base]):
        at = {r: v[i] for r, v in per_rank.items()}
        befores = {r: (a.before or [None])[0] for r, a in at.items()}
        total = (c.after or [None])[0]
        if (c.reduce != "SUM" or c.numel != 1 or total is None
                or not str(c.dtype).startswith(("float", "bfloat"))
                or None in befores.values()
                or any(float(v).is_integer() for v in befores.values())):
            continue
        mean = total / size
        later = next((p for p in printed if p.t > c.t), None)
        if later is None or not _shows(later.text, total) or _shows(later.text, mean):
            continue
        return found(Problem(
            f"rank {base} prints \"{later.text.strip()[:80]}\" at {place(*file_line(later))}: "
            f"{number(total)} is the all_reduce(SUM) at {place(*file_line(c))} of the "
            f"{size} ranks' values ("
            + ", ".join(f"rank {r}: {number(v)}" for r, v in sorted(befores.items()))
            + f"), not their mean {number(mean)}: the printed number grows with the world "
              "size",
            {"printed": later.text, "sum": total, "mean": mean, "values": befores,
             "world_size": size}, *file_line(later)))
    return passed("no printed number is an undivided SUM of the ranks' means")
