"""The doctor's report as text: a linter-style line per finding (``train.py:88: error
sampler-set-epoch: ...``) with its fix and book section, then a summary; with no findings, the
table of what was checked. No line is longer than ``WIDTH``, the book's column (the doctor's
page prints this text), as long as a fix's lines (code, not wrapped) keep to ``FIX_WIDTH``:
each finding names its section as ``page.md#anchor`` and the report gives the book's address
once, since a whole address is longer than the column."""

from __future__ import annotations

import textwrap

from ddplab.common.home import book
from ddplab.doctor.judging.findings import Status, paths_from_root, place, shown_path

WIDTH = 100
FIX_INDENT = " " * 8
FIX_WIDTH = WIDTH - len(FIX_INDENT) - 4  # a fix's longest line: checks.py, judge_model.py


def wrapped(text: str) -> list[str]:
    """``text`` in lines of at most ``WIDTH``, the lines after the first indented."""
    return textwrap.wrap(text, WIDTH, subsequent_indent="    ", break_on_hyphens=False)


def finding_lines(f) -> list[str]:
    head = f"{place(f.file, f.line)}: {f.kind} {f.id}: {f.message}"
    lines = wrapped(head)
    lines.append("    fix:")
    lines += [FIX_INDENT + line for line in f.fix.splitlines()]
    lines.append(f"    book: {f.url}")
    return lines


def table(diagnosis) -> list[str]:
    width = max(len(v.id) for v in diagnosis.checks)
    rows = []
    for v in diagnosis.checks:
        status = (f"{v.status} ({len(v.findings)})" if v.status == Status.FOUND
                  else str(v.status))
        first, *rest = textwrap.wrap(v.why, WIDTH - width - 20, break_on_hyphens=False) or [""]
        rows.append(f"  {v.id:<{width}}  {status:<14}  {first}")
        rows += [" " * (width + 20) + line for line in rest]
    return rows


LEGEND = ("errors exit 1; waste: slower or more memory than needed; advisory: what the run "
          "cannot prove")  # what the counts mean, at the report's end


def summary(diagnosis) -> str:
    return ", ".join(summary_parts(diagnosis))


def summary_parts(diagnosis) -> tuple[str, str]:
    """The summary's two halves: the run (script, ranks, steps), then its outcome, counts and
    what they mean."""
    counts = {kind: sum(f.kind == kind for f in diagnosis.findings)
              for kind in ("error", "waste", "advisory")}
    backend = diagnosis.backend_used or "no group"
    if diagnosis.backend_requested and diagnosis.backend_requested != diagnosis.backend_used:
        backend += f"; the script asked for {diagnosis.backend_requested}"
    said = ", ".join(f"{n} {kind}{'s' if n != 1 and kind == 'error' else ''}"
                     for kind, n in counts.items())
    unjudged = len(diagnosis.not_judged())
    if unjudged:
        said += f", {unjudged} check{'s' * (unjudged != 1)} not judged"
    return (f"ddplab doctor: {shown_path(diagnosis.script)} on {diagnosis.world_size or '?'} "
            f"ranks ({backend}), {diagnosis.steps_run} optimizer steps",
            f"{diagnosis.outcome}: {said} ({LEGEND})")


def not_judged_lines(diagnosis) -> list[str]:
    """The checks this run could not judge, and what each needs: a clean exit is no pass."""
    return [line for v in diagnosis.not_judged()
            for line in wrapped(f"not judged on this run: {v.id}: {v.why}")]


def mapped_lines(diagnosis) -> list[str]:
    """The report's first line where the script's CUDA ran on the CPU: the machine, and what
    was mapped."""
    mapped = diagnosis.mapped
    if not mapped:
        return []
    gpus = f"{mapped['gpus']} GPU{'s' * (mapped['gpus'] != 1)}"
    calls = ", ".join(c["what"] for c in mapped["calls"])
    return wrapped(f"CUDA mapped onto the CPU ({gpus} here for {mapped['ranks']} ranks; NCCL "
                   f"runs as gloo, judged by NCCL's rules): {calls}")


def side_effect_lines(diagnosis) -> list[str]:
    """What the script would have written, by rank (its writes went to a scratch folder), and
    the trackers kept from recording."""
    lines = []
    if diagnosis.writes:
        by_rank = "; ".join(f"rank {rank}: " + ", ".join(shown_path(p) for p in paths)
                            for rank, paths in sorted(diagnosis.writes.items()))
        lines += wrapped(f"your files are unchanged: what the script wrote went to a scratch "
                         f"folder ({by_rank})")
    if diagnosis.trackers:
        settings = ", ".join(f"{k}={v}" for k, v in diagnosis.trackers["settings"].items())
        lines += wrapped(f"{', '.join(diagnosis.trackers['modules'])} recorded no run: "
                         f"{settings}")
    return lines


def failed(crash) -> str:
    """How a crash no check explains is told: the script's own failure, or possibly the
    doctor's where it came after anything the doctor changed of the run (``changes``)."""
    changes = crash.changes
    if not changes:
        return "failed on its own (no DDP check explains it)"
    return ("failed, possibly the doctor's doing: no DDP check explains it, and it came after "
            "the doctor changed the run (" + "; ".join(changes) + ")")


@paths_from_root
def report(diagnosis) -> str:
    lines = mapped_lines(diagnosis)
    for f in diagnosis.findings:
        lines += finding_lines(f)
    if diagnosis.findings:
        lines.append(f"each book section above is a page of {book()}")
    crash = diagnosis.unexplained_crash()
    if crash is not None:
        who = f"rank {crash.rank}" if crash.rank is not None else "the script"
        lines += wrapped(f"{shown_path(diagnosis.script)}: {who} {failed(crash)}:")
        lines += ["    " + line for line in crash.traceback.rstrip().splitlines()]
    if not diagnosis.findings and diagnosis.exit_code() != 2:
        lines.append("no findings. What was checked:")
        lines += table(diagnosis)
    lines += not_judged_lines(diagnosis) + side_effect_lines(diagnosis)
    run, outcome = summary_parts(diagnosis)
    if len(summary(diagnosis)) <= WIDTH:
        lines.append(summary(diagnosis))
    else:  # the outcome, its counts and what they mean on lines of their own
        lines += wrapped(run + ",") + ["    " + line
                                       for line in textwrap.wrap(outcome, WIDTH - 4)]
    return "\n".join(lines)
