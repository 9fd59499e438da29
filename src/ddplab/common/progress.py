"""How a sweep reports progress: between its short runs it calls ``progress(done, total,
label)``, when the caller gave one (``widgets.explore_sweep`` shows it as a bar). A rank cannot
report while it runs, so a long experiment is a sequence of short ``ddplab.run`` calls
(ARCHITECTURE.md, "The screen, and work run ahead"). A sweep may also pass ``partial``, a
result of the runs done so far, which a panel draws at once (the figure fills in run by run)."""

from __future__ import annotations

import inspect


def report(progress, done: int, total: int, label: str, partial=None) -> None:
    """Tell ``progress`` (if any) that ``done`` of ``total`` runs are over; ``label`` names the
    next one; ``partial``, when given, is passed on as a keyword (progress functions that take
    three arguments keep working where a sweep passes none)."""
    if progress is None:
        return
    if partial is None or not _takes_partial(progress):
        progress(done, total, label)
    else:
        progress(done, total, label, partial=partial)


def _takes_partial(progress) -> bool:
    """Whether ``progress`` accepts ``partial=`` (a reader's own ``print``-like function of
    three arguments does not, and keeps working)."""
    try:
        parameters = inspect.signature(progress).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return any(p.name == "partial" or p.kind is p.VAR_KEYWORD for p in parameters)
