"""While a panel's run takes long (a sweep, a timed run, a hang waited out), its status line
ticks: the seconds so far and, where the ranks note their steps (``hang_watch.note(...,
step=k)``, as the hang pitfalls do), each rank's last step, so that a reader watches a hang
happen rather than a frozen figure for the timeout.

A thread of the kernel does it: a widget's change is sent to the page at once from any thread
(ipykernel's IOPub thread), while the kernel's main thread waits on the ranks. It reads the
ranks' log files itself, without the pool's lock, which the waiting run holds.
"""

from __future__ import annotations

import glob
import json
import os
import threading
import time

from ddplab.engine import pool

NOTE = "ddplab-note "  # ddplab.engine.hang_watch.NOTE; not imported: that imports torch
FIRST_TICK = 0.15  # s: a move that answers sooner shows no ticking
EVERY = 0.25  # s between ticks


class WhileRunning:
    """``with WhileRunning(status):`` ticks ``status.value`` until the block ends."""

    def __init__(self, status, what: str = "running"):
        self.status, self.what = status, what
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
            steps = rank_steps(self._offsets)
            text = f"<i>{self.what}... {time.perf_counter() - self._start:.1f} s</i>"
            if steps:
                text += " &nbsp; last step noted: " + ", ".join(
                    f"rank {rank} {step}" for rank, step in sorted(steps.items()))
            self.status.value = text
            if self._stop.wait(EVERY):
                return


def _log_files() -> list[str]:
    shared = pool._shared
    folder = getattr(shared, "_logdir", None) if shared is not None else None
    return glob.glob(os.path.join(folder, "rank*.log")) if folder else []


def _log_sizes() -> dict:
    sizes = {}
    for path in _log_files():
        try:
            sizes[path] = os.path.getsize(path)
        except OSError:
            pass
    return sizes


def rank_steps(offsets: dict) -> dict:
    """Each rank's last noted step in what its log gained since ``offsets`` (path: bytes)."""
    steps = {}
    for path in _log_files():
        try:
            with open(path, "rb") as f:
                f.seek(offsets.get(path, 0))
                text = f.read().decode(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith(NOTE):
                try:
                    entry = json.loads(line[len(NOTE):])
                except ValueError:  # a line still being written
                    continue
                if "step" in entry:
                    steps[entry["rank"]] = entry["step"]
    return steps
