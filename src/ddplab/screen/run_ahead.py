"""The owner of work run ahead: one thread per kernel, its lock, its queue of panels and each
panel's kept results (what ``screen.ahead``'s docstring tells, done here).

:class:`RunAhead` holds all of its state under one condition variable: the panels in the order
they were made (the queue: the panel used last first, then those below it, then above), each
panel's :class:`Kept` results and the keys whose run raised, what the thread runs now
(``_current``), the reader's moves in progress (``_readers``, of which ``_alone`` wait for the
pool) and whether a cell runs (``_paused``). The thread starts a run only when none of these
holds and the kernel has been idle for ``quiet`` seconds; before each call of a run it asks
``_should_stop`` (through ``engine.turns``), and gives way. A reader's move is one call,
:meth:`RunAhead.move`.

A panel is duck-typed here (``ahead.Panel``: ``ahead``, ``run``, ``figure``, ``context``,
``neighbours()``, ``key(values)``), so this module imports nothing of the screen.
"""

from __future__ import annotations

import collections
import contextvars
import threading
import time
import weakref
from dataclasses import dataclass

from ddplab.engine import turns

QUIET = 0.5  # s the kernel stays idle after a figure or a cell before the thread starts a run
KEPT = 64  # results a panel keeps (a PNG of 30-150 KB each)


@dataclass(frozen=True)
class Entry:
    """A real run of one panel's values: its result and its figure, as PNG."""

    result: object
    png: bytes
    run_s: float
    draw_s: float
    ahead: bool  # run ahead in the background, not by the reader's own move


def key_of(values: dict, where=None) -> tuple:
    """Every control's value, by name, and ``where`` (the placement the run went to), as a key
    (a value that cannot be hashed by its repr)."""
    key = [where]
    for name, value in values.items():
        try:
            hash(value)
        except TypeError:
            value = ("repr", repr(value))
        key.append((name, type(value).__name__, value))  # 1 and True and 1.0 stay apart
    return tuple(key)


class Kept:
    """The newest ``size`` entries by key; reads and writes from two threads."""

    def __init__(self, size: int = KEPT):
        self.size = size
        self._entries = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key) -> Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)  # shown again: kept longer
            return entry

    def put(self, key, entry: Entry) -> None:
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def __contains__(self, key) -> bool:
        with self._lock:
            return key in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class RunAhead:
    """The kernel's one thread that runs panels' neighbouring values, and what it keeps."""

    def __init__(self, quiet: float = QUIET, paused: bool = False):
        self.quiet = quiet
        self._cond = threading.Condition()
        self._panels = []  # weak references, in the order the panels were made
        self._kept = weakref.WeakKeyDictionary()  # panel -> Kept
        self._failed = weakref.WeakKeyDictionary()  # panel -> keys whose run raised
        self._focus = None  # weak reference to the panel the reader used last
        self._readers = 0  # reader's moves in progress
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

    def add(self, panel) -> None:
        """Run ``panel``'s neighbours ahead and keep its results."""
        with self._cond:
            self._panels.append(weakref.ref(panel))
            self._kept[panel] = Kept()
            self._failed[panel] = set()

    def kept(self, panel) -> Kept:
        """``panel``'s kept results (none for a panel not run ahead)."""
        with self._cond:
            kept = self._kept.get(panel)  # (an empty Kept is falsy: no `or` here)
        return kept if kept is not None else Kept(0)

    def move(self, panel, key, *, by_reader: bool, show, run, waiting=lambda: None) -> None:
        """A reader's move on ``panel`` to the values ``key`` names: ``show(entry)`` the run
        kept for them, or the one under way (``waiting()`` first, then it is waited for); else
        ``run()`` with nothing beside it, once the thread's call has ended, and keep the
        ``(result, png, run_s, draw_s)`` it returns (None: it failed, nothing to keep). The
        thread starts nothing until the move is over."""
        with self._cond:
            self._readers += 1
        alone = False
        try:
            entry = self._kept_or_under_way(panel, key, waiting) if panel.ahead else None
            if entry is not None:
                show(entry)
                return
            with self._cond:
                alone = True
                self._alone += 1
                self._until_idle()
            ran = run()
            if ran is not None and panel.ahead:
                self.kept(panel).put(key, Entry(*ran, ahead=False))
        finally:
            with self._cond:
                self._readers -= 1
                self._alone -= alone
                self._idle_since = time.monotonic()
                panel.context = contextvars.copy_context()
                if panel.ahead and by_reader:
                    self._focus = weakref.ref(panel)
                self._cond.notify_all()

    def shown(self, panel) -> None:
        """``panel`` is on screen now (a chooser showed it): its neighbours first."""
        with self._cond:
            self._focus = weakref.ref(panel)
            self._idle_since = time.monotonic()
            self._cond.notify_all()

    def _kept_or_under_way(self, panel, key, waiting) -> Entry | None:
        entry = self.kept(panel).get(key)
        with self._cond:
            if entry is not None or self._current != (panel, key):
                return entry
        waiting()
        with self._cond:
            self._waited = (panel, key)
            try:
                while self._current == (panel, key):
                    self._cond.wait()
            finally:
                self._waited = None
        return self.kept(panel).get(key)

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
        """(The lock held.) (panel, key, values) of the first neighbour not yet kept, or
        None."""
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
                if key not in self._kept[panel] and key not in self._failed[panel]:
                    return panel, key, values
        return None

    def _should_stop(self, panel, key) -> bool:
        """Asked before each call of a run in the thread (``engine.turns``)."""
        if self._stopped:
            return True
        if self._waited == (panel, key):  # a reader waits for this very run
            return False
        return bool(self._paused or self._alone
                    or key not in {panel.key(v) for v in panel.neighbours()})

    def _compute(self, panel, key, values: dict) -> None:
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
            with self._cond:
                failed = self._failed[panel]
                if len(failed) >= KEPT:
                    failed.clear()
                failed.add(key)
            return
        self.kept(panel).put(key, Entry(result, png, ran - start, time.perf_counter() - ran,
                                        ahead=True))
