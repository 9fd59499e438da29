"""A crash, recorded where it happens: the exception object is still there, so its type, its
message, its frames, the reader's line and the file an ``OSError`` names are read from it, not
parsed back from text later (``messages.Crash``)."""

from __future__ import annotations

import os
import traceback

from ddplab.doctor.messages import Crash, Frame
from ddplab.doctor.ranks import changes, where

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the doctor's package


def _readers_frames(exc: BaseException) -> list:
    """The traceback's frames without the doctor's own (its wrappers sit between the script and
    torch) and runpy's: what ``python train.py`` would have printed."""
    return [f for f in traceback.extract_tb(exc.__traceback__)
            if not f.filename.startswith(_HERE + os.sep) and "runpy" not in f.filename]


def crash_of(exc: BaseException) -> Crash:
    """The crash ``exc`` is, with the innermost frame in the reader's files as its line."""
    frames = _readers_frames(exc)
    error = traceback.format_exception_only(type(exc), exc)[-1].strip()
    text = "".join(["Traceback (most recent call last):\n", *traceback.format_list(frames),
                    *traceback.format_exception_only(type(exc), exc)])
    own = [f for f in frames if where.is_reader_file(f.filename)]
    path = getattr(exc, "filename", None) if isinstance(exc, OSError) else None
    return Crash(type=type(exc).__name__, error=error, traceback=text,
                 frames=tuple(Frame(f.filename, f.lineno or 0, f.name) for f in frames),
                 script_file=os.path.realpath(own[-1].filename) if own else None,
                 script_line=own[-1].lineno if own else None,
                 path=os.fspath(path) if isinstance(path, (str, os.PathLike)) else None,
                 changes=tuple(changes.in_effect()))


def exit_crash(status) -> Crash:
    """A ``sys.exit`` with a failing status: no traceback, the status."""
    return Crash(type="SystemExit", error=f"SystemExit({status!r})",
                 traceback=f"the script exited with status {status!r}\n", exit_status=status,
                 changes=tuple(changes.in_effect()))
