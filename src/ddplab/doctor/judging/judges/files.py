"""``every-rank-writes``: the same file written by several ranks; ``read-while-written``: a
rank that reads a file another rank writes, with nothing between the two to order them.

What the run proves a rank wrote into a file: a ``torch.save`` to it, an ``open`` that
appends or updates (``"a"``, ``"+"``), or a second ``open`` for writing. A single ``open`` with
``"w"`` may only empty the file (build-nanogpt's log: every rank opens it at start-up, only
rank 0 appends afterwards): the audit hook sees the open, not the bytes, so several ranks that
each open a path once with ``"w"`` are an advisory that says so, not an error.
"""

from __future__ import annotations

import os

import ddplab.doctor.records as records
from ddplab.doctor.judging.check import Check, Crashes
from ddplab.doctor.judging.findings import place, shown_path
from ddplab.doctor.judging.judgement import (
    Problem,
    file_line,
    found,
    not_applicable,
    passed,
    ranks_text,
)


def _writes_content(write, same_path) -> bool:
    """Whether this run shows the rank of ``write`` putting bytes into the file."""
    record = write.record
    if record.how != "open" or any(c in (record.mode or "w") for c in "a+"):
        return True
    return sum(w.rank == write.rank for w in same_path) > 1


FIX_ONE_OPENER = """\
# one rank opens (and empties) the file; the others leave it alone
log = open(path, "w") if dist.get_rank() == 0 else None
if log is not None:
    print(line, file=log, flush=True)"""


def _mkdir_clash(evidence, made) -> list:
    """A folder several ranks create with os.mkdir, where one of them failed with
    FileExistsError on it: the run's own proof (the ranks' calls and the failure)."""
    crash = evidence.crashed()
    if crash is None or crash.type != "FileExistsError" or not crash.path:
        return []
    failed = os.path.normpath(crash.path)  # as the script passed it, maybe relative
    by_path = {}
    for w in made:
        by_path.setdefault(w.record.path, []).append(w)
    for path, ws in sorted(by_path.items()):
        ranks = sorted({w.rank for w in ws})
        if len(ranks) > 1 and (path == failed or path.endswith(os.sep + failed)):
            first = ws[0].record
            return [Problem(
                f"{ranks_text(ranks)} all create the folder {shown_path(path)} (os.mkdir at "
                f"{place(*file_line(first))}, step {first.step}): the first one wins and rank "
                f"{crash.rank} fails with FileExistsError",
                {"path": path, "ranks": ranks, "how": "mkdir", "failed": crash.rank},
                *file_line(first))]
    return []


def every_rank_writes(evidence, earlier):
    writes = evidence.all(records.Write)
    if not writes:
        return not_applicable("no rank wrote a file")
    if (evidence.world_size or 0) < 2:
        return not_applicable("one rank")
    made = [w for w in writes if w.record.how == "mkdir"]
    writes = [w for w in writes if w.record.how != "mkdir"]
    clash = _mkdir_clash(evidence, made)
    if clash:
        return found(*clash)
    if not writes:
        return not_applicable("no rank wrote a file")
    by_path = {}
    for w in writes:  # a path on one host: node-local disks may each hold one copy
        host = evidence.by_rank[w.rank].host
        by_path.setdefault((host, w.record.path), []).append(w)
    problems = []
    for (_, path), ws in sorted(by_path.items()):
        ranks = sorted({w.rank for w in ws})
        if len(ranks) < 2:
            continue
        proved = sorted({w.rank for w in ws if _writes_content(w, ws)})
        first = next((w.record for w in ws if w.rank in proved), ws[0].record)
        steps = sorted({w.record.step for w in ws})
        if len(proved) > 1:
            problems.append(Problem(
                f"{ranks_text(proved)} all write {shown_path(path)} ({first.how} at "
                f"{place(*file_line(first))}, step {first.step}): the {len(proved)} copies "
                "race each other on a shared disk, and a rank that reads the file may find it "
                "half-written",
                {"path": path, "ranks": proved, "how": first.how, "steps": steps},
                *file_line(first)))
            continue
        once = [w for w in ws if w.rank not in proved]
        opened = once[0].record
        problems.append(Problem(
            f"{ranks_text(sorted({w.rank for w in once}))} open{'s' * (len(once) == 1)} "
            f"{shown_path(path)} with \"{opened.mode}\" once (at {place(*file_line(opened))}, "
            f"step {opened.step})"
            + (f", and {ranks_text(proved)} writes to it afterwards" if proved else "")
            + ": the doctor sees the opens, not the bytes, so it cannot tell whether "
              "the other ranks only empty the file or write it too; if they write, only one "
              "rank should",
            {"path": path, "ranks": ranks, "writers": proved, "steps": steps},
            *file_line(opened), kind="advisory", fix=FIX_ONE_OPENER))
    if problems:
        return found(*problems[:3])
    return passed(f"{len(by_path)} file{'s' if len(by_path) > 1 else ''} written, each by one "
                  "rank")


def _entered(evidence, rank: int, t: int) -> int:
    """The collectives ``rank`` had entered before its record ``t``: a collective returns only
    once every rank has entered it, so what one rank did before its k-th collective comes
    before what another does after its k-th."""
    return sum(1 for c in evidence.records(records.Collective, rank) if not c.p2p and c.t < t)


def read_while_written(evidence, earlier):
    """A rank reads a file another rank writes, and the two ranks had entered as many
    collectives each: no collective orders the write before the read (or after it), so the read
    races the write."""
    if (evidence.world_size or 0) < 2:
        return not_applicable("one rank")
    reads = evidence.all(records.Read)
    if not reads:
        return not_applicable("no rank read a file the run wrote")
    writes = {}
    for w in evidence.all(records.Write):
        if w.record.how != "mkdir":
            writes.setdefault(w.record.path, []).append(w)
    crash, problems, seen = evidence.crashed(), [], set()
    for r in reads:
        read = r.record
        for w in writes.get(read.path, []):
            if w.rank == r.rank or (r.rank, read.path) in seen:
                continue
            entered = _entered(evidence, r.rank, read.t)
            if entered != _entered(evidence, w.rank, w.record.t):
                continue
            seen.add((r.rank, read.path))
            failed = crash is not None and crash.rank == r.rank and \
                crash.script_line == read.line
            problems.append(Problem(
                f"rank {r.rank} reads {shown_path(read.path)} at {place(*file_line(read))} "
                f"({read.size} bytes then) while rank {w.rank} writes it ({w.record.how} at "
                f"{place(*file_line(w.record))}): each had entered {entered} collectives, so "
                "none orders the write before the read, and the read may find the file empty "
                "or half-written"
                + (f"; here it did: rank {r.rank} failed there ({crash.error[:120]})"
                   if failed else ""),
                {"path": read.path, "reader": r.rank, "writer": w.rank, "size": read.size,
                 "collectives_before": entered, "failed": failed}, *file_line(read)))
    if problems:
        return found(*problems[:3])
    return passed(f"{len(reads)} read{'s' * (len(reads) != 1)} of files the run wrote, each "
                  "ordered after the other ranks' writes by a collective")


FIX_WRITES = """\
if dist.get_rank() == 0:  # one writer: the other ranks' copy is the same
    torch.save(model.module.state_dict(), path)
dist.barrier()  # the others wait until the file is complete before they read it"""


READ_WHILE_WRITTEN = Check(
    "read-while-written", "error",
    "a rank reads a file another rank writes only after a collective that follows the write",
    "hangs-checkpoints",
    FIX_WRITES, read_while_written,
    explains=Crashes(types=("JSONDecodeError", "EOFError", "UnpicklingError",
                            "UnicodeDecodeError"),
                     texts=("PytorchStreamReader failed",)))


EVERY_RANK_WRITES = Check(
    "every-rank-writes", "error",
    "each file is written by one rank only",
    "hangs-checkpoints",
    FIX_WRITES, every_rank_writes, explains=Crashes(types=("FileExistsError",)), also=("advisory",))
