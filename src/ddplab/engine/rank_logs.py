"""Where rank processes write: one log folder per pool, one file per rank, read back by the
caller (``ddplab.logs()``), also after a rank died.

A rank never writes into a notebook (see :mod:`ddplab.engine.rank`); it writes here. The folder is
removed when its pool closes; the folders of callers that were killed are removed by the next
pool that starts on the machine.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import tempfile

LOG_PREFIX = "ddplab-logs-"  # then the caller's pid: tempdir/ddplab-logs-<pid>-<random>


def send_output_to(log_path: str) -> None:
    """Point this process's fds 1 and 2 at ``log_path`` (appended to), line-buffered.

    A rank must never print into a notebook: ipykernel forwards output written to the kernel's
    own fds, which children inherit, and nbval does not capture it, so stray output would both
    clutter cells and break output checks. The engine's ranks and the doctor's (whose log tail
    the report shows) call it first."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)


def remove_stale_logs() -> None:
    """Remove the log folders of callers that are gone. A caller that exits removes its own
    (``Pool.close`` at exit); one that is killed (a Jupyter kernel ended with SIGKILL, a
    killed test) cannot, so the next pool on this machine does it."""
    for path in glob.glob(os.path.join(tempfile.gettempdir(), LOG_PREFIX + "*-*")):
        pid = os.path.basename(path)[len(LOG_PREFIX):].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def read(path: str) -> str:
    """A log's text so far; empty if the rank has not written yet."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def new_folder() -> str:
    """A fresh log folder for a pool of this process, after clearing dead callers' folders."""
    remove_stale_logs()
    return tempfile.mkdtemp(prefix=f"{LOG_PREFIX}{os.getpid()}-")
