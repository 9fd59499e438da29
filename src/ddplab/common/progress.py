"""How a sweep reports progress: between its short runs it calls ``progress(done, total,
label)``, when the caller gave one (``widgets.explore_sweep`` shows it as a bar). A rank cannot
report while it runs, so a long experiment is a sequence of short ``ddplab.run`` calls
(ARCHITECTURE.md, "Sweeps and progress")."""

from __future__ import annotations


def report(progress, done: int, total: int, label: str) -> None:
    """Tell ``progress`` (if any) that ``done`` of ``total`` runs are over; ``label`` names the
    next one."""
    if progress is not None:
        progress(done, total, label)
