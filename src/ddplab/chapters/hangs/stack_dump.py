"""Where each rank of a hung run waits: a Python stack dump of every rank, taken while the hang
is on, with py-spy (from PyPI; ``py-spy dump --pid PID`` reads a running process's stacks
without stopping it, as root or for a process you may trace).

    python -m ddplab uneven --world-size 2 --extra-batches 1 --timeout 4 --stacks

Each watched rank notes its process id first (``hang_watch.note(call_id, rank, pid=...)``).
:func:`when_stuck` gives ``hang_watch.run_watched`` a function that runs beside the call: it
reads the ranks' notes until every rank has noted the steps it will complete, then dumps every
rank's stack until two dumps in a row agree: a rank that waits no longer moves.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

from ddplab.engine import hang_watch


def py_spy() -> str:
    """The py-spy executable: on the PATH, or beside this Python (a venv not activated)."""
    found = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
    if found is None:
        raise RuntimeError("py-spy is not installed: pip install py-spy")
    return found


def dump(pid: int) -> str:
    """``py-spy dump --pid PID``: every thread's Python stack, innermost frame first."""
    done = subprocess.run([py_spy(), "dump", "--pid", str(pid)], capture_output=True,
                          text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"py-spy dump --pid {pid} failed: {done.stderr.strip()}")
    return done.stdout


def main_thread_frames(text: str) -> list[str]:
    """The main thread's frames from a dump, innermost first, as ``function (file:line)`` with
    the file's path cut to what follows ``site-packages/`` or ``src/``."""
    frames, inside = [], False
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # colours, where the terminal asks for them
    for line in text.splitlines():
        if line.startswith("Thread "):
            inside = '"MainThread"' in line
        elif inside and line.startswith("    ") and line.strip():
            frames.append(re.sub(r"\(.*(?:site-packages|src)/", "(", line.strip()))
    return frames


def when_stuck(steps_per_rank: list[int], every: float = 0.1, limit: float = 10.0):
    """For ``run_watched(..., during=...)``: once every rank has noted its pid and
    ``steps_per_rank[rank]`` steps (or more), dump every rank's stack each ``every`` seconds
    until two dumps in a row are the same (a rank that waits no longer moves), and return each
    rank's main-thread frames (None for every rank if that did not happen within ``limit``)."""
    world_size = len(steps_per_rank)

    def during(call_id: str) -> list[list[str] | None]:
        deadline = time.perf_counter() + limit
        last = None
        while time.perf_counter() < deadline:
            notes = hang_watch.read_notes(call_id, world_size)
            pids = [next((n["pid"] for n in rank if "pid" in n), None) for rank in notes]
            steps = [sum("step" in n for n in rank) for rank in notes]
            if None not in pids and all(s >= n for s, n in zip(steps, steps_per_rank)):
                stacks = [main_thread_frames(dump(pid)) for pid in pids]
                if stacks == last:
                    return stacks
                last = stacks
                time.sleep(every)
            else:
                time.sleep(0.02)
        return [None] * world_size

    return during
