"""Turns at the shared pool: work done ahead in a background thread gives way to other calls.

The pool serves one call at a time (``Pool.run`` holds its lock while the ranks run). A lab
computes the values next to a slider in a thread of the kernel while the reader reads
(``ddplab.screen.ahead``); the reader's own call must never wait behind a queue of that work.
So a thread marked :func:`background` asks before each call it makes whether to give way: when
a call from another thread is waiting for the pool or running, or its own ``should_stop()``
says so, it raises :class:`GaveWay` instead of calling. A call it has already started runs to
its end: ending the ranks mid-call would cost a respawn and every kept group, more than the
rest of most calls (ARCHITECTURE.md, "The screen, and work run ahead"). So a foreground call
waits behind one background call at most, and a sweep computed ahead stops between two of its runs.
"""

from __future__ import annotations

import contextlib
import threading

_local = threading.local()
_foreground = 0  # calls of threads not marked background, waiting for the pool or running
_count = threading.Lock()


class GaveWay(BaseException):  # noqa: N818 - named for what happened, as StopIteration is
    """A background thread's call not made: another call goes first. A ``BaseException``, so
    that a driver's ``except Exception`` (a hang panel's, a reference's) does not take it for
    the run's own failure."""


@contextlib.contextmanager
def background(should_stop=None):
    """Mark this thread's calls inside the block as background work; ``should_stop()`` (if
    given) is asked before each call too."""
    _local.should_stop = should_stop or (lambda: False)
    try:
        yield
    finally:
        del _local.should_stop


def in_background() -> bool:
    """Whether this thread is inside :func:`background` (a sweep's progress goes nowhere)."""
    return hasattr(_local, "should_stop")


@contextlib.contextmanager
def call():
    """Around one call to the pool: a background thread gives way here (:class:`GaveWay`)
    where it should; any other thread's call counts as foreground while it waits and runs."""
    global _foreground
    should_stop = getattr(_local, "should_stop", None)
    if should_stop is not None:
        if _foreground or should_stop():
            raise GaveWay
        yield
        return
    with _count:
        _foreground += 1
    try:
        yield
    finally:
        with _count:
            _foreground -= 1
