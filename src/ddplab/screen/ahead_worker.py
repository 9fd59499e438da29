"""The thread that runs panels' values ahead, one run at a time, and the reader's turns.

One :class:`Worker` per kernel (``screen.ahead`` makes it). The rules it keeps, whose turn it
is, are told in ``screen.ahead``'s docstring; here is how: one condition variable guards what
the thread runs now (``_current``), the reader's turns in progress (``_readers``, of which
``_alone`` wait for the pool) and whether a cell runs (``_paused``). The thread starts a run
only when none of these holds and the kernel has been idle for ``quiet`` seconds; before each
call of a run it asks ``_should_stop`` (through ``engine.turns``), and gives way.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
import weakref
from typing import TYPE_CHECKING

from ddplab.engine import turns
from ddplab.screen.kept import KEPT, Entry

if TYPE_CHECKING:
    from ddplab.screen.ahead import Panel, Turn

QUIET = 0.5  # s the kernel stays idle after a figure or a cell before the thread starts a run


class Worker:
    """The kernel's one thread that runs panels' neighbouring values (see the module)."""

    def __init__(self, quiet: float = QUIET, paused: bool = False):
        self.quiet = quiet
        self._cond = threading.Condition()
        self._panels = []  # weak references, in the order the panels were made
        self._focus = None  # weak reference to the panel the reader used last
        self._readers = 0  # reader's turns in progress
        self._alone = 0  # of them, those that wait for the pool
        self._paused = paused  # a cell runs
        self._idle_since = time.monotonic()
        self._current = None  # (panel, key) the thread runs now
        self._waited = None  # (panel, key) a reader waits for
        self._stopped = False
        self.started = 0  # runs started in the thread (tests count them)
        self._thread = threading.Thread(target=self._loop, name="ddplab-ahead", daemon=True)
        self._thread.start()

    # -- the reader's side (the kernel's main thread)

    def add(self, panel: Panel) -> None:
        with self._cond:
            self._panels.append(weakref.ref(panel))

    @contextlib.contextmanager
    def turn(self, panel: Panel, turn: Turn):
        """Around a reader's move on ``panel``: the thread starts nothing meanwhile."""
        with self._cond:
            self._readers += 1
        try:
            yield turn
        finally:
            with self._cond:
                self._readers -= 1
                self._alone -= turn.alone_asked
                self._idle_since = time.monotonic()
                panel.context = contextvars.copy_context()
                if panel.ahead and turn.by_reader:
                    self._focus = weakref.ref(panel)
                self._cond.notify_all()

    def shown(self, panel: Panel) -> None:
        """``panel`` is on screen now (a chooser showed it): its neighbours first."""
        with self._cond:
            self._focus = weakref.ref(panel)
            self._idle_since = time.monotonic()
            self._cond.notify_all()

    def under_way(self, panel: Panel, key) -> bool:
        with self._cond:
            return self._current == (panel, key)

    def wait_for(self, panel: Panel, key) -> None:
        with self._cond:
            if self._current != (panel, key):
                return
            self._waited = (panel, key)
            try:
                while self._current == (panel, key):
                    self._cond.wait()
            finally:
                self._waited = None

    def alone(self, turn: Turn) -> None:
        """Wait until the thread has ended its call (and its draw)."""
        with self._cond:
            if not turn.alone_asked:
                turn.alone_asked = True
                self._alone += 1
            self._until_idle()

    # -- the kernel's cells (IPython's events)

    def cell_starts(self, wait: bool = True) -> None:
        """A cell is about to run: the thread starts nothing until it is done; ``wait``: and
        the call under way ends (and its draw) before the cell starts."""
        with self._cond:
            self._paused = True
            if wait:
                self._until_idle()

    def cell_ends(self) -> None:
        with self._cond:
            self._paused = False
            self._idle_since = time.monotonic()
            self._cond.notify_all()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread (at the end of its call) and wait for it."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def settled(self) -> bool:
        """Nothing running, and nothing left to run ahead."""
        with self._cond:
            return self._current is None and self._next() is None

    def _until_idle(self) -> None:
        """(The lock held.) Tell the thread, and wait until it runs nothing."""
        self._cond.notify_all()
        while self._current is not None:
            self._cond.wait()

    # -- the thread

    def _loop(self) -> None:
        while True:
            with self._cond:
                task = None
                while task is None:
                    if self._stopped:
                        return
                    wait = self._wait_left()
                    if wait == 0:
                        task = self._next()
                        wait = None if task is None else wait
                    if task is None:
                        self._cond.wait(wait)
                panel, key, values = task
                self._current = (panel, key)
                self.started += 1
            try:
                self._compute(panel, key, values)
            finally:
                with self._cond:
                    self._current = None
                    self._cond.notify_all()

    def _wait_left(self) -> float | None:
        """Seconds until the thread may start a run (0: now), or None: until told."""
        if self._paused or self._readers:
            return None
        return max(0.0, self.quiet - (time.monotonic() - self._idle_since))

    def _next(self):
        """(panel, key, values) of the first neighbour not yet kept, or None."""
        alive = [ref() for ref in self._panels]
        self._panels = [ref for ref, panel in zip(self._panels, alive) if panel is not None]
        alive = [panel for panel in alive if panel is not None]
        focus = self._focus() if self._focus is not None else None
        start = alive.index(focus) if focus in alive else 0
        # The panel the reader used last, then those below it, then those above (a reader
        # reads down a lab; at its start, the first panel first).
        for panel in alive[start:] + alive[:start]:
            for values in panel.neighbours():
                key = panel.key(values)
                if key not in panel.kept and key not in panel.failed:
                    return panel, key, values
        return None

    def _should_stop(self, panel: Panel, key) -> bool:
        """Asked before each call of a run in the thread (``engine.turns``)."""
        if self._stopped:
            return True
        if self._waited == (panel, key):  # a reader waits for this very run
            return False
        return bool(self._paused or self._alone
                    or key not in {panel.key(v) for v in panel.neighbours()})

    def _compute(self, panel: Panel, key, values: dict) -> None:
        start = time.perf_counter()
        try:
            with turns.background(lambda: self._should_stop(panel, key)):
                result = panel.context.run(panel.run, **values)
            ran = time.perf_counter()
            if self._stopped:  # the kernel is ending
                return
            # Drawn now, whoever waits: a reader who needs the pool waits for one draw more
            # (tens of ms), rather than drawing it on a move later.
            png = panel.figure.png(result)
        except turns.GaveWay:
            return
        except Exception:  # shown when the reader moves there: the run is made again then
            if len(panel.failed) >= KEPT:
                panel.failed.clear()
            panel.failed.add(key)
            return
        panel.kept.put(key, Entry(result, png, ran - start, time.perf_counter() - ran,
                                  ahead=True))
