"""A child process that dies with its parent: the engine's ranks, the doctor's zygote and the
ranks it forks all call :func:`exit_with_parent` first, so that nothing outlives a killed kernel
or a killed doctor, even a rank stuck inside a collective."""

from __future__ import annotations

import signal
import sys


def exit_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (``prctl(PR_SET_PDEATHSIG)``;
    elsewhere a no-op: the parent's own cleanup has to do)."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
