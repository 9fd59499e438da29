"""Files written: every ``open`` for writing and ``os.mkdir`` (``sys.addaudithook``) and every
``torch.save`` to a path (torch writes those from C++, past the audit hook), with the rank,
the step and the line; and every ``open`` for reading of a file this run wrote (its scratch
copy), with its size then. Only writes the reader's code asks for count: an ``open`` in the
script itself or one or two library calls below it (``np.save``), not a cache a library keeps
for itself."""

from __future__ import annotations

import contextlib
import os
import sys
import threading

import ddplab.doctor.records as records
from ddplab.doctor.ranks import patching, scratch, where
from ddplab.doctor.ranks import recorder as _recorder

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT
_INSIDE = threading.local()


@contextlib.contextmanager
def unwatched():
    """While inside, this thread's file calls are the doctor's own: nothing is recorded."""
    was = getattr(_INSIDE, "busy", False)
    _INSIDE.busy = True
    try:
        yield
    finally:
        _INSIDE.busy = was


LIBRARY_WRITERS = ("tempfile.py", "<frozen importlib._bootstrap_external>")
DEPTH = 2  # library frames between the reader's line and the open: np.save(path) is one


def _from_library(frame) -> bool:
    """A write a library makes for itself on the way from the reader's line (a temporary
    file, a byte-code cache, a compiler's cache deep inside torch): not the reader's file."""
    depth = 0
    while frame is not None and not where.is_reader_file(frame.f_code.co_filename):
        name = frame.f_code.co_filename
        depth += not where.is_own_file(name)  # the doctor's wrappers are not a library
        if name.endswith(LIBRARY_WRITERS) or "importlib" in name or depth > DEPTH:
            return True
        frame = frame.f_back
    return False


def _note(path, how: str, frame, mode: str | None = None, keys: tuple = ()) -> None:
    if getattr(_INSIDE, "busy", False) or scratch.making_folders() or _from_library(frame):
        return
    _INSIDE.busy = True
    try:
        spot = where.frame_line(frame)
        name = os.fspath(path)
        if isinstance(name, bytes):
            name = os.fsdecode(name)
        if spot is None or "__pycache__" in name or name.startswith("/dev/"):
            return
        _recorder.RECORDER.add(records.Write(path=scratch.original(os.path.abspath(name)),
                                             how=how, file=spot[0], line=spot[1], mode=mode,
                                             prefixed=len(keys),
                                             first_key=keys[0] if keys else None))
    finally:
        _INSIDE.busy = False


def _note_read(path, frame) -> None:
    """A read of a file this run wrote: the scratch copy is what ``open`` was given."""
    name = os.fsdecode(os.fspath(path))
    folder = scratch.root()
    if (not folder or not name.startswith(folder + os.sep) or getattr(_INSIDE, "busy", False)
            or _from_library(frame)):
        return
    spot = where.frame_line(frame)
    if spot is None:
        return
    _INSIDE.busy = True
    try:
        size = os.stat(name).st_size if os.path.exists(name) else -1
        _recorder.RECORDER.add(records.Read(path=scratch.original(name), size=size,
                                            file=spot[0], line=spot[1]))
    finally:
        _INSIDE.busy = False


def _audit(event: str, args) -> None:
    if event == "os.mkdir" and isinstance(args[0], (str, bytes, os.PathLike)):
        _note(args[0], "mkdir", sys._getframe(1))  # judged only where it fails on a rank
        return
    if event != "open":
        return
    path, mode, flags = args
    if not isinstance(path, (str, bytes, os.PathLike)):
        return
    writing = (any(c in mode for c in "wax+") if isinstance(mode, str)
               else bool((flags or 0) & WRITE_FLAGS))
    if writing:
        _note(path, "open", sys._getframe(1), mode if isinstance(mode, str) else None)
    else:
        _note_read(path, sys._getframe(1))


def _prefixed_keys(obj, tensor_type) -> tuple:
    """The keys of a state dict in ``obj`` (``obj`` itself, or one value of a dict such as
    ``{"model": ..., "epoch": ...}``) when every key starts with ``module.``: DDP's names."""
    for candidate in (obj, *(obj.values() if isinstance(obj, dict) else ())):
        if (isinstance(candidate, dict) and candidate
                and all(isinstance(k, str) and k.startswith("module.") for k in candidate)
                and any(isinstance(v, tensor_type) for v in candidate.values())):
            return tuple(candidate)
    return ()


def install() -> None:
    import torch

    def make_save(real):
        def save(obj, f, *args, **kwargs):
            if isinstance(f, (str, os.PathLike)):
                _note(f, "torch.save", sys._getframe(1), keys=_prefixed_keys(obj, torch.Tensor))
            return real(obj, f, *args, **kwargs)
        return save

    patching.wrap(torch, "save", make_save)
    if not patching.ORIGINALS.get(("hooks", "audit")):
        patching.ORIGINALS[("hooks", "audit")] = True
        sys.addaudithook(_audit)
