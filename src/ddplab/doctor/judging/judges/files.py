"""``every-rank-writes``: the same file written by several ranks."""

from __future__ import annotations

import ddplab.doctor.records as records
from ddplab.doctor.judging.findings import place, shown_path
from ddplab.doctor.judging.judgement import (
    Problem,
    file_line,
    found,
    not_applicable,
    passed,
    ranks_text,
)


def every_rank_writes(evidence, earlier):
    writes = evidence.all(records.Write)
    if not writes:
        return not_applicable("no rank wrote a file")
    if (evidence.world_size or 0) < 2:
        return not_applicable("one rank")
    by_path = {}
    for w in writes:  # a path on one host: node-local disks may each hold one copy
        host = evidence.by_rank[w.rank].get("host")
        by_path.setdefault((host, w.record.path), []).append(w)
    problems = []
    for (_, path), ws in sorted(by_path.items()):
        ranks = sorted({w.rank for w in ws})
        if len(ranks) > 1:
            first = ws[0].record
            problems.append(Problem(
                f"{ranks_text(ranks)} all write {shown_path(path)} ({first.how} at "
                f"{place(*file_line(first))}, step {first.step}): the {len(ranks)} copies race "
                "each other on a shared disk, and a rank that reads the file may find it "
                "half-written",
                {"path": path, "ranks": ranks, "how": first.how,
                 "steps": sorted({w.record.step for w in ws})}, *file_line(first)))
    if problems:
        return found(*problems[:3])
    return passed(f"{len(by_path)} file{'s' if len(by_path) > 1 else ''} written, each by one "
                  "rank")
