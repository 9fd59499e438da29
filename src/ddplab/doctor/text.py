"""The doctor's report as text: a linter-style line per finding (``train.py:88: error
sampler-set-epoch: ...``) with its fix and book section, then a summary; with no findings, the
table of what was checked."""

from __future__ import annotations

import textwrap

from ddplab.doctor.findings import paths_from_root, place, shown_path

WIDTH = 100


def finding_lines(f) -> list[str]:
    head = f"{place(f.file, f.line)}: {f.kind} {f.id}: {f.message}"
    lines = textwrap.wrap(head, WIDTH, subsequent_indent="    ")
    lines.append("    fix:")
    lines += ["        " + line for line in f.fix.splitlines()]
    lines.append(f"    book: {f.url}")
    return lines


def table(diagnosis) -> list[str]:
    width = max(len(v.id) for v in diagnosis.checks)
    rows = []
    for v in diagnosis.checks:
        status = {"found": f"found ({len(v.findings)})"}.get(v.status, v.status)
        first, *rest = textwrap.wrap(v.why, WIDTH - width - 20) or [""]
        rows.append(f"  {v.id:<{width}}  {status:<14}  {first}")
        rows += [" " * (width + 20) + line for line in rest]
    return rows


def summary(diagnosis) -> str:
    counts = {kind: sum(f.kind == kind for f in diagnosis.findings)
              for kind in ("error", "waste", "advisory")}
    backend = diagnosis.backend_used or "no group"
    if diagnosis.backend_requested and diagnosis.backend_requested != diagnosis.backend_used:
        backend += f"; the script asked for {diagnosis.backend_requested}"
    said = ", ".join(f"{n} {kind}{'s' if n != 1 and kind == 'error' else ''}"
                     for kind, n in counts.items())
    return (f"ddplab doctor: {shown_path(diagnosis.script)} on {diagnosis.world_size or '?'} "
            f"ranks ({backend}), {diagnosis.steps_run} optimizer steps, {diagnosis.outcome}: "
            f"{said}")


@paths_from_root
def report(diagnosis) -> str:
    lines = []
    for f in diagnosis.findings:
        lines += finding_lines(f)
    crash = diagnosis.crash
    if crash is not None and not crash.get("explained"):
        who = f"rank {crash['rank']}" if crash.get("rank") is not None else "the script"
        lines.append(f"{shown_path(diagnosis.script)}: {who} failed on its own (no DDP check "
                     "explains it):")
        lines += ["    " + line for line in (crash.get("traceback") or "").rstrip().splitlines()]
    if diagnosis.outcome == "no group":
        lines.append(f"{shown_path(diagnosis.script)}: the script never joined a process group "
                     "(init_process_group was not called): nothing distributed to check")
    if not diagnosis.findings and diagnosis.exit_code() != 2:
        lines.append("no findings. What was checked:")
        lines += table(diagnosis)
    lines.append(summary(diagnosis))
    return "\n".join(lines)
