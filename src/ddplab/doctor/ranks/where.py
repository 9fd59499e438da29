""""The line": the innermost stack frame inside the reader's own files.

The reader's files are those under the script's folder, except installed packages and ddplab
itself (unless the script is one of ddplab's own examples, run where it lies). A call into torch
from ``Trainer._run_batch`` in ``train.py`` is reported at the line of ``train.py`` that made
it, however deep in torch the doctor noticed it.
"""

from __future__ import annotations

import os
import sys

_ROOT = {"dir": None}
_CACHE: dict[str, bool] = {}
_OWN = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # ddplab


def set_reader_dir(path: str) -> None:
    _ROOT["dir"] = os.path.realpath(path)
    _CACHE.clear()


def reader_dir() -> str | None:
    return _ROOT["dir"]


def is_reader_file(filename: str) -> bool:
    known = _CACHE.get(filename)
    if known is None:
        root = _ROOT["dir"]
        path = os.path.realpath(filename) if not filename.startswith("<") else ""
        known = bool(root and _inside(path, root) and (
            _inside(root, _OWN)  # ddplab's own example, in a checkout or installed
            or ("site-packages" not in path and "dist-packages" not in path
                and not _inside(path, _OWN))))
        _CACHE[filename] = known
    return known


def _inside(path: str, folder: str) -> bool:
    return path.startswith(folder + os.sep)


def is_own_file(filename: str) -> bool:
    """A file of ddplab itself (the doctor's wrappers sit between the script and torch)."""
    return _inside(filename, _OWN) and not is_reader_file(filename)


def frame_line(frame) -> tuple[str, int] | None:
    """(file, line) of the innermost reader frame at or above ``frame``."""
    while frame is not None:
        code = frame.f_code
        if is_reader_file(code.co_filename):
            return os.path.realpath(code.co_filename), frame.f_lineno
        frame = frame.f_back
    return None


def fields(spot: tuple[str, int] | None) -> dict:
    """``file`` and ``line`` of a record, from a spot (None: no line of the reader's)."""
    file, line = spot or (None, None)
    return {"file": file, "line": line}


def line() -> tuple[str, int] | None:
    """(file, line) of the innermost reader frame calling into the doctor's hook."""
    return frame_line(sys._getframe(1))


def inner_call(frame, depth: int = 12) -> str:
    """What a stuck frame is doing, named by its innermost function outside the reader's files
    and the doctor (``all_reduce``, ``backward``, ``wait``): a hint for a roll call."""
    names = []
    while frame is not None and len(names) < depth:
        code = frame.f_code
        if is_reader_file(code.co_filename):
            break
        if not code.co_filename.startswith(_OWN + os.sep):
            names.append(code.co_name)
        frame = frame.f_back
    return names[0] if names else ""
