"""Computed ahead: while the reader reads a panel, the kernel runs the values next to its sliders.

A slider move that re-runs real DDP costs the run and the draw (benchmarks/RESULTS.md, "Slider
latency"); the warm pool sits idle while the reader reads. So, in a Jupyter kernel, one
background thread (``run_ahead.RunAhead``, one per kernel) runs each panel's neighbouring values,
every slider one step up and one step down from where it stands, and draws their figures on a
figure of its own; each result is kept with its PNG, keyed by every control's value
and the placement (``run_ahead.Kept``). A move to a value kept shows it at once; any
other move runs as before. Every figure shown is still a real run of exactly those values.
The thread's runs go where the process is placed (``ddplab.placed``), as the reader's do; a
run on another placement is another run, so the key names the placement, and a neighbour is
never one the panel would refuse to run (a slider stops at what the placement serves).

Whose turn it is, the reader's first:

* The reader's move takes its turn (:meth:`Panel.move`, the one call ``widgets.explore``
  makes). A kept value is shown without touching the pool. A value the thread is running
  now is waited for (it is already under way).
  Any other value waits for nothing but the call the thread has started (``engine.turns``: the
  thread gives way before its next call; a started call runs to its end, which costs the reader
  less than ending the ranks and forming their groups again) and then runs alone.
* The thread starts a run only when the kernel has been idle for ``QUIET`` seconds: no
  move in progress, no cell running (IPython's ``pre_execute`` waits for the thread's call to
  end and pauses it; ``post_execute`` lets it go on). So a run, timed or not, never has another
  run beside it, and a figure drawn in the thread never lands in a cell's output (pyplot's
  figures are global; the inline backend shows, after a cell, every figure still open). The
  comm package fires the same two events around every widget message: there the thread is
  paused but not waited for, so a move to a kept value does not wait for the call under way.
* What it runs, in order: the neighbours of the panel the reader used last (the slider moved
  last first, in the direction it moved), then those of the panels below it, then above it (a
  reader reads down a lab; before any move, from the first panel on).
  Each panel keeps its last ``run_ahead.KEPT`` results. A panel whose run may
  hang on purpose (it has a ``timeout`` control) is never run ahead, and its results are not
  kept: its point is the wait.

Outside a kernel (a script, the tests, a book build) nothing runs ahead. ``DDPLAB_AHEAD=0``
turns it off in a kernel too. This module is the panel's side and the kernel's hooks;
``screen.run_ahead`` owns the thread, its lock, its queue and the kept results.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import os
import sys
import time

import ipywidgets

from ddplab.engine import placement, pool
from ddplab.screen.live_figure import LiveFigure
from ddplab.screen.run_ahead import Entry, Kept, RunAhead, key_of

NOTE = ("<small>While you read, the values one step either side of each slider are run ahead: "
        "a move there shows at once, from a real run of exactly those values.</small>")


class Panel:
    """One panel's side: its controls, its neighbouring values, the reader's moves.

    ``owner`` None (outside a kernel) makes every move a plain run; ``ahead`` False (a panel
    whose run may hang on purpose) keeps nothing and runs nothing ahead, but its runs still
    take their turn, so nothing runs beside them. ``fits(values)`` says whether the panel
    would run ``values`` here (a neighbour it would refuse is not run ahead)."""

    def __init__(self, owner: RunAhead | None, run, plot, controls: dict, ahead: bool = True,
                 fits=None):
        self.owner, self.run, self.controls = owner, run, controls
        self.fits = fits or (lambda values: True)
        self.ahead = owner is not None and ahead
        self.figure = LiveFigure(plot)  # the thread's own figure, never the one on screen
        self.moved = None  # (control's name, +1 or -1): the last move, its neighbours first
        self.context = contextvars.copy_context()  # the reader's: the thread runs in it
        if self.ahead:
            owner.add(self)

    @property
    def kept(self) -> Kept:
        """This panel's kept results (the owner's)."""
        return self.owner.kept(self) if self.owner is not None else Kept(0)

    def values(self) -> dict:
        return {name: w.value for name, w in self.controls.items()}

    def key(self, values: dict) -> tuple:
        """What a run of ``values`` is kept by: every value, and the process's placement."""
        return key_of(values, placement.placement())

    def neighbours(self) -> list[dict]:
        """The values one step either side of each slider: the slider moved last first, in
        the direction it moved; none the panel would not run."""
        values = self.values()
        sliders = [name for name, w in self.controls.items()
                   if isinstance(w, ipywidgets.IntSlider)]
        first, direction = self.moved if self.moved else (None, 1)
        sliders.sort(key=lambda name: name != first)
        found = []
        for name in sliders:
            w = self.controls[name]
            way = direction if name == first else 1  # the others: up first
            for step in (way * w.step, -way * w.step):
                moved = {**values, name: values[name] + step}
                if w.min <= moved[name] <= w.max and self.fits(moved):
                    found.append(moved)
        return found

    def move(self, values: dict, change, *, show, run, waiting=lambda: None) -> None:
        """A move to ``values`` (``change``: the slider's, None for the panel's first run):
        ``show(entry, where, started)`` the run kept for them, else ``run()`` alone; see
        ``RunAhead.move``."""
        if change is not None:
            name = next((n for n, w in self.controls.items() if w is change.get("owner")), None)
            old, new = change.get("old"), change.get("new")
            if isinstance(old, int) and isinstance(new, int) and new != old:
                self.moved = (name, 1 if new > old else -1)
        if self.owner is None:
            run()
            return
        where, started = placement.placement(), time.perf_counter()
        self.owner.move(self, key_of(values, where), by_reader=change is not None,
                        show=lambda entry: show(entry, where, started), run=run,
                        waiting=waiting)


def shown_text(entry: Entry, elapsed: float, where) -> str:
    """A panel's status line for a kept result shown, ending with its placement as a run's
    does."""
    how = "run ahead while you read" if entry.ahead else "kept from before"
    return (f"shown in {1e3 * elapsed:.0f} ms: a real DDP run of these values, {how} "
            f"(its run took {1e3 * entry.run_s:.0f} ms, its draw {1e3 * entry.draw_s:.0f}), "
            f"{where}")


def shown(panel: Panel | None) -> None:
    """``panel`` is on screen now (a chooser showed it): run its neighbours first."""
    if panel is not None and panel.ahead:
        panel.owner.shown(panel)


_owner: RunAhead | None = None


def owner() -> RunAhead | None:
    """The kernel's run-ahead owner, started with the first panel; None outside a Jupyter
    kernel."""
    global _owner
    if _owner is not None or os.environ.get("DDPLAB_AHEAD", "1") == "0":
        return _owner
    ipython = sys.modules.get("IPython")  # imported by every kernel; never imported here
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or getattr(shell, "kernel", None) is None:
        return None
    # Made by a cell (a panel's first run): paused until that cell's post_execute.
    _owner = RunAhead(paused=True)
    events = shell.events

    def cell_starts():
        # Let the thread go on only after the inline backend has shown the cell's figures:
        # last among post_execute's callbacks, whichever registered since.
        with contextlib.suppress(ValueError):
            events.unregister("post_execute", _owner.cell_ends)
        events.register("post_execute", _owner.cell_ends)
        # The comm package fires pre_execute and post_execute around a widget's message too
        # (comm/base_comm.py, BaseComm.handle_msg): a slider's move is no cell. Nothing new
        # starts meanwhile, but a move to a kept value must not wait for the call under way.
        _owner.cell_starts(wait=not widget_message(shell))

    events.register("pre_execute", cell_starts)
    events.register("post_execute", _owner.cell_ends)
    pool.shared()  # its close registered first, so that the thread's runs before it
    atexit.register(_owner.close)  # (atexit runs last in, first out)
    return _owner


def widget_message(shell) -> bool:
    """Whether the kernel is handling a widget's message (a ``comm_msg``), not a cell."""
    try:
        parent = shell.kernel.get_parent("shell")  # ipykernel 6 and later
    except (AttributeError, TypeError):
        parent = getattr(shell, "parent_header", None)
    return ((parent or {}).get("header") or {}).get("msg_type") == "comm_msg"
