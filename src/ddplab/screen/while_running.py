"""While a panel's run takes long (a sweep, a timed run, a hang waited out), its status line
ticks from the first 150 ms: the seconds so far, a countdown to the call's timeout when the
panel has one, and where each rank is, from the notes the ranks write to their logs
(``engine.notes``, torch-free): the call a rank waits in (``waiting=...``, noted before every DDP
forward and backward by ``hang_watch.watch_ddp`` and before the check-in), its last finished
step, or its check-in. A reader watches a hang happen (which ranks wait, in which call, and
when the pool will give up) rather than a frozen figure for the timeout.

A thread of the kernel does it: a widget's change is sent to the page at once from any thread
(ipykernel's IOPub thread), while the kernel's main thread waits on the ranks. It reads the
ranks' log files itself (``Pool.log_paths``), without the pool's lock, which the waiting run
holds.
"""

from __future__ import annotations

import html
import os
import threading
import time

from ddplab.engine import notes, pool

FIRST_TICK = 0.15  # s: a move that answers sooner shows no ticking
EVERY = 0.1  # s between ticks: the countdown moves in tenths


class WhileRunning:
    """``with WhileRunning(status, timeout=...):`` ticks ``status.value`` until the block
    ends; ``timeout`` (seconds, optional) adds a countdown to it."""

    def __init__(self, status, what: str = "running", timeout: float | None = None):
        self.status, self.what, self.timeout = status, what, timeout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)

    def __enter__(self):
        self._start = time.perf_counter()
        self._offsets = _log_sizes()  # what ranks noted before this run is not shown
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _tick(self) -> None:
        if self._stop.wait(FIRST_TICK):
            return
        while True:
            self.status.value = self.text(time.perf_counter() - self._start,
                                          rank_states(self._offsets))
            if self._stop.wait(EVERY):
                return

    def text(self, elapsed: float, states: dict) -> str:
        text = f"<i>{self.what}... {elapsed:.1f} s</i>"
        if self.timeout is not None:
            left = max(0.0, self.timeout - elapsed)
            text += (f" &nbsp; <b>timeout in {left:.1f} s</b> (a rank silent for "
                     f"{self.timeout:g} s ends the run as hung)")
        return text + "".join(f"<br>rank {rank}: {html.escape(state, quote=False)}"
                              for rank, state in sorted(states.items()))


def _log_sizes() -> dict:
    sizes = {}
    for path in pool.shared_log_paths():
        try:
            sizes[path] = os.path.getsize(path)
        except OSError:
            pass
    return sizes


def rank_notes(offsets: dict):
    """Every note the ranks' logs gained since ``offsets`` (path: bytes), in each log's order."""
    for path in pool.shared_log_paths():
        try:
            with open(path, "rb") as f:
                f.seek(offsets.get(path, 0))
                text = f.read().decode(errors="replace")
        except OSError:
            continue
        yield from notes.in_text(text)


def rank_states(offsets: dict) -> dict:
    """Where each rank is, by its last note that says so (``engine.notes.position``)."""
    return notes.states(rank_notes(offsets))
