"""Nothing of the reader's is changed: every file the script writes lands in the run's scratch
folder, at the same path below it (``/home/me/run/checkpoint.pt`` is
``<scratch>/home/me/run/checkpoint.pt``), shared by the ranks of the run; a later read of a
path written in this run reads the scratch copy, and an existing file is read as it is. A file
opened to append or update is copied to the scratch folder first.

Python's file calls are wrapped where a path becomes a file: ``open`` (``builtins`` and
``io``: pathlib, numpy and ``torch.load`` go through it), ``os.open``, ``os.mkdir`` /
``makedirs``, ``os.stat`` / ``lstat`` / ``readlink`` (``os.path.exists``, ``Path.exists``),
``os.listdir``, ``os.symlink``, ``os.remove`` / ``unlink`` / ``rmdir`` / ``rename`` /
``replace``, ``shutil.rmtree``, and ``torch.save`` (which writes a path from C++). A removal
of an existing file of the reader's removes nothing.

Left where they are: the temporary folder, ``/dev``, ``/proc``, ``/sys``, caches under
``~/.cache`` and Python's own installation (a library's cache is not the reader's file, and
some are read back from C++, past these wrappers). Experiment trackers are set to send
nothing (``TRACKERS``, each one's own setting, read in its source: wandb 0.31, mlflow-skinny
3.18, comet_ml 3.58, huggingface_hub 2.5). A setting the script passes itself wins where the
tracker lets it (``mlflow.set_tracking_uri``, ``wandb.init(mode=...)``).
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import shutil
import sys
import tempfile
import threading

from ddplab.doctor.ranks import patching
from ddplab.doctor.settings import Settings

VARIABLE = "DDPLAB_DOCTOR_SCRATCH"  # the run's scratch folder, in every rank's environment
TRACKERS = {  # each tracker's own switch: what the report says was set
    # wandb: wandb.init returns a disabled run, no wandb-core process, nothing sent
    # (run_settings._noop -> make_disabled_run, wandb/sdk/wandb_init.py)
    "WANDB_MODE": "disabled",
    # MLflow: a file store in the scratch folder (set below), which MLflow 3 refuses unless
    # allowed (FileStore.__init__, mlflow/store/tracking/file_store.py), and no telemetry
    # (is_telemetry_disabled, mlflow/telemetry/utils.py)
    "MLFLOW_TRACKING_URI": None,
    "MLFLOW_ALLOW_FILE_STORE": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    # Comet: Experiment, OfflineExperiment and comet_ml.start disabled, "no network
    # communication with the Comet backend" ("comet.auto_log.disable", comet_ml/_online.py
    # and experiment.py); COMET_OFFLINE_DIRECTORY would only say where offline archives go
    "COMET_AUTO_LOG_DISABLE": "1",
    # Hugging Face Hub: every request raises OfflineModeIsEnabled, uploads too
    # (hf_request_event_hook, huggingface_hub/utils/_http.py)
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}
TRACKER_MODULES = ("wandb", "mlflow", "comet_ml", "huggingface_hub", "tensorboard",
                   "torch.utils.tensorboard")
WRITES = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_ROOT = {"dir": None, "kept": (), "readers": (), "doctors": ()}
_OWN = threading.local()  # set while this module makes the scratch copy's folders itself


def making_folders() -> bool:
    """Whether the folders being made are the scratch copy's own (no write of the reader's)."""
    return getattr(_OWN, "busy", False)


@contextlib.contextmanager
def _own_folders():
    _OWN.busy = True
    try:
        yield
    finally:
        _OWN.busy = False


@contextlib.contextmanager
def _as_asked(path, copy):
    """An error about the scratch copy names the path the script asked for, as a plain run's
    would (``FileExistsError: ... 'checkpoints/epoch-0'``)."""
    try:
        yield
    except OSError as exc:
        if copy and exc.filename == copy:
            raise type(exc)(exc.errno, exc.strerror, os.fspath(path)) from None
        raise


def root() -> str | None:
    return _ROOT["dir"]


def _absolute(path) -> str | None:
    if isinstance(path, int) or not isinstance(path, (str, bytes, os.PathLike)):
        return None
    name = os.fspath(path)
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    return os.path.abspath(name)


def scratch_copy(path) -> str | None:
    """Where a write to ``path`` lands (None: a path left where it is)."""
    name = _absolute(path)
    if name is None or _ROOT["dir"] is None or name.startswith(_ROOT["dir"] + os.sep):
        return None
    inside = name.rstrip(os.sep) + os.sep  # a folder of the reader's is the reader's too
    if inside.startswith(_ROOT["doctors"]):  # the run's own files, wherever the script lies
        return None
    if inside.startswith(_ROOT["kept"]) and not inside.startswith(_ROOT["readers"]):
        return None
    return _ROOT["dir"] + name


def original(path: str) -> str:
    """The reader's path of a scratch copy (any other path as it is)."""
    scratch = _ROOT["dir"]
    return path[len(scratch):] if scratch and path.startswith(scratch + os.sep) else path


def for_reading(path):
    """The scratch copy where this run wrote ``path``, else ``path``."""
    copy = scratch_copy(path)
    return copy if copy is not None and os.path.lexists(copy) else path


def for_writing(path, keep_contents: bool):
    """The scratch copy to write instead of ``path``, its folder made; with ``keep_contents``
    (append, update), the original's bytes copied in first."""
    copy = scratch_copy(path)
    if copy is None:
        return path
    if not os.path.lexists(copy):
        with _own_folders():
            os.makedirs(os.path.dirname(copy), exist_ok=True)
        if keep_contents and os.path.isfile(_absolute(path)):
            shutil.copyfile(_absolute(path), copy)
    return copy


def _writes(mode) -> bool:
    return isinstance(mode, str) and any(c in mode for c in "wax+")


def install(reader_dir: str) -> None:
    """Writes to the scratch folder from now on; ``reader_dir`` (the script's folder) and the
    current folder are the reader's, wherever they are (a temporary folder too)."""
    folder = os.environ.get(VARIABLE)
    if not folder:
        return
    folder = os.path.realpath(folder)
    home_cache = os.path.join(os.path.expanduser("~"), ".cache")
    kept = {folder, os.path.realpath(tempfile.gettempdir()), tempfile.gettempdir(), "/dev",
            "/proc", "/sys", home_cache, sys.prefix, sys.base_prefix, sys.exec_prefix}
    readers = {os.path.abspath(reader_dir), os.getcwd()}
    record = Settings.current().record  # the reference run's files
    doctors = {os.path.dirname(folder), *([os.path.realpath(record)] if record else [])}
    _ROOT.update(dir=folder, kept=tuple(k.rstrip(os.sep) + os.sep for k in kept),
                 readers=tuple(r.rstrip(os.sep) + os.sep for r in readers),
                 doctors=tuple(d.rstrip(os.sep) + os.sep for d in doctors))
    TRACKERS.update(MLFLOW_TRACKING_URI=f"file://{folder}/mlruns")
    os.environ.update(TRACKERS)
    _wrap_files()
    _wrap_folders()


def stop() -> None:
    """Writes go where they are asked to from now on: the doctor's own report, written in the
    script's process under torchrun."""
    _ROOT["dir"] = None


def trackers_used() -> dict:
    """The trackers the script imported, and the settings that kept them from recording."""
    used = [name for name in TRACKER_MODULES if name in sys.modules]
    return {"modules": used, "settings": dict(TRACKERS)} if used and root() else {}


def _wrap_files() -> None:
    import torch

    def make_open(real):
        def open(file, mode="r", *args, **kwargs):
            if _writes(mode):
                return real(for_writing(file, keep_contents="w" not in mode), mode, *args,
                            **kwargs)
            return real(for_reading(file), mode, *args, **kwargs)
        return open

    def make_os_open(real):
        def os_open(path, flags, *args, **kwargs):
            if flags & WRITES and kwargs.get("dir_fd") is None:
                path = for_writing(path, keep_contents=not flags & os.O_TRUNC)
            elif kwargs.get("dir_fd") is None:
                path = for_reading(path)
            return real(path, flags, *args, **kwargs)
        return os_open

    def make_save(real):
        def save(obj, f, *args, **kwargs):
            if isinstance(f, (str, bytes, os.PathLike)):
                f = for_writing(f, keep_contents=False)
            return real(obj, f, *args, **kwargs)
        return save

    def make_reader(real):
        def read(path, *args, **kwargs):
            if kwargs.get("dir_fd") is None:
                path = for_reading(path)
            return real(path, *args, **kwargs)
        return read

    patching.wrap(builtins, "open", make_open, "scratch")
    patching.wrap(io, "open", make_open, "scratch")
    patching.wrap(os, "open", make_os_open, "scratch")
    patching.wrap(os, "stat", make_reader, "scratch")
    patching.wrap(os, "lstat", make_reader, "scratch")
    patching.wrap(os, "readlink", make_reader, "scratch")
    patching.wrap(torch, "save", make_save, "scratch")


def _wrap_folders() -> None:
    def make_mkdir(real):
        def mkdir(path, *args, **kwargs):
            if scratch_copy(path) and os.path.isdir(_absolute(path)):
                sys.audit("os.mkdir", path, -1, None)  # the call the real one would announce
                raise FileExistsError(17, "File exists", os.fspath(path))
            copy = for_writing(path, keep_contents=False)
            with _as_asked(path, copy if copy != path else None):
                return real(copy, *args, **kwargs)
        return mkdir

    def make_makedirs(real):
        def makedirs(name, mode=0o777, exist_ok=False):
            if scratch_copy(name) and os.path.isdir(_absolute(name)) and not exist_ok:
                raise FileExistsError(17, "File exists", os.fspath(name))
            copy = scratch_copy(name)
            if copy:  # the folders above it are the scratch copy's, not the script's writes
                with _own_folders():
                    real(os.path.dirname(copy), mode, exist_ok=True)
            with _as_asked(name, copy):
                return real(copy if copy else name, mode, exist_ok=True if copy else exist_ok)
        return makedirs

    def make_listdir(real):
        def listdir(path="."):
            copy = scratch_copy(path)
            if not copy or not os.path.isdir(copy):
                return real(path)
            try:  # the reader's folder and what the run wrote into it
                names = set(real(path))
            except FileNotFoundError:  # a folder the run made
                names = set()
            return sorted(names | set(real(copy)))
        return listdir

    def make_scandir(real):
        def scandir(path="."):
            copy = scratch_copy(path) if not isinstance(path, int) else None
            if not copy or not os.path.isdir(copy):
                return real(path)
            return _Listing(real, path, copy)
        return scandir

    def make_remove(real):
        def remove(path, *args, **kwargs):
            copy = scratch_copy(path)
            if copy is None:
                return real(path, *args, **kwargs)
            if os.path.lexists(copy):
                return real(copy, *args, **kwargs)
            if not os.path.lexists(_absolute(path)):
                return real(path, *args, **kwargs)  # the error a missing file gives
            return None  # the reader's own file: kept
        return remove

    def make_rename(real):
        def rename(src, dst, *args, **kwargs):
            source, target = scratch_copy(src), scratch_copy(dst)
            if source is None and target is None:
                return real(src, dst, *args, **kwargs)
            if source is not None and not os.path.lexists(source):
                source = for_writing(src, keep_contents=True)  # the reader's file: copied
            target = for_writing(dst, keep_contents=False)
            return real(source or src, target, *args, **kwargs)
        return rename

    def make_rmtree(real):
        def rmtree(path, *args, **kwargs):
            copy = scratch_copy(path)
            if copy is None:
                return real(path, *args, **kwargs)
            if os.path.lexists(copy):
                return real(copy, *args, **kwargs)
            return None
        return rmtree

    def make_symlink(real):
        def symlink(src, dst, *args, **kwargs):  # the link is written, its target is text
            return real(src, for_writing(dst, keep_contents=False), *args, **kwargs)
        return symlink

    patching.wrap(os, "symlink", make_symlink, "scratch")
    patching.wrap(os, "mkdir", make_mkdir, "scratch")
    patching.wrap(os, "makedirs", make_makedirs, "scratch")
    patching.wrap(os, "listdir", make_listdir, "scratch")
    patching.wrap(os, "scandir", make_scandir, "scratch")
    for name in ("remove", "unlink", "rmdir"):
        patching.wrap(os, name, make_remove, "scratch")
    for name in ("rename", "replace"):
        patching.wrap(os, name, make_rename, "scratch")
    patching.wrap(shutil, "rmtree", make_rmtree, "scratch")


class _Entry:
    """An entry of the scratch copy of a folder, named as an entry of the folder the script
    listed (``weights/epoch-0.pt``, not the scratch path): ``os.DirEntry`` cannot be made from
    Python, so its methods are the scratch entry's."""

    __slots__ = ("_entry", "name", "path")

    def __init__(self, entry, folder):
        self._entry, self.name = entry, entry.name
        self.path = os.path.join(folder, entry.name)

    def __getattr__(self, name):  # is_dir, is_file, is_symlink, stat, inode
        return getattr(self._entry, name)

    def __fspath__(self):
        return self.path

    def __repr__(self):
        return f"<DirEntry {self.name!r}>"


class _Listing:
    """``os.scandir`` of a folder the run wrote into: the script's own writes (the scratch
    copy's entries) over the reader's folder's, as ``os.scandir`` gives them (an iterator and
    a context manager)."""

    def __init__(self, real, path, copy):
        folder = os.fspath(path)
        copy = os.fsencode(copy) if isinstance(folder, bytes) else copy
        with real(copy) as entries:
            written = [_Entry(e, folder) for e in entries]
        names = {e.name for e in written}
        try:
            with real(path) as entries:
                kept = [e for e in entries if e.name not in names]
        except FileNotFoundError:  # a folder the run made
            kept = []
        self._entries = iter(kept + written)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._entries)

    def close(self):
        self._entries = iter(())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
