"""Processes the script starts itself (``mp.spawn``, as the PyTorch DDP tutorial's
``multigpu.py`` does): each one that joins a process group is a rank, and is watched too.

``multiprocessing``'s ``Process.run`` is wrapped in every process of the run: in rank 0's own
process (where ``start`` also tells the other processes that this script spawns its ranks) and,
through a ``sitecustomize`` on the children's ``PYTHONPATH``, at the start of each spawned
interpreter. DataLoader workers and multiprocessing's own helpers are left alone.
"""

from __future__ import annotations

import dataclasses
import os

import ddplab.doctor.records as records
from ddplab.doctor.ranks import patching
from ddplab.doctor.ranks import recorder as _recorder

CHILD = "DDPLAB_DOCTOR_CHILD"  # "1" in every process started below a rank process
SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child_site")
SET_BY_SCRIPT: set[str] = set()  # torchrun's variables the script set itself (os.environ[...])


def _helper(target) -> bool:
    module = getattr(target, "__module__", "") or ""
    return module.startswith(("torch.utils.data", "multiprocessing", "concurrent"))


class _Recorded:
    """The function ``mp.spawn`` runs, with its traceback kept before ``spawn._wrap`` sends it
    to the parent and exits 1."""

    def __init__(self, fn):
        self.fn = fn
        self.crash = None

    def __call__(self, *args):
        from ddplab.doctor.ranks.crashes import crash_of

        try:
            return self.fn(*args)
        except Exception as exc:
            self.crash = crash_of(exc)
            raise


def patch_process() -> None:
    import multiprocessing.process as mp_process

    def make_start(real):
        def start(self):
            from ddplab.doctor.ranks.watch.group import MODE_UNSAID, TORCHRUN_VARIABLES, say_mode

            if os.environ.get(MODE_UNSAID) == "1" and not _helper(self._target):
                say_mode(records.Mode.SPAWN)
                for name in TORCHRUN_VARIABLES:  # what `python multigpu.py` would see
                    if name not in SET_BY_SCRIPT:  # a script's own WORLD_SIZE stays
                        os.environ.pop(name, None)
            return real(self)
        return start

    def make_run(real):
        def run(self):
            if os.environ.get(CHILD) != "1" or _helper(self._target):
                return real(self)
            return _run_child(self, real)
        return run

    def make_setitem(real):
        def __setitem__(self, key, value):
            from ddplab.doctor.ranks import where
            from ddplab.doctor.ranks.watch.group import TORCHRUN_VARIABLES

            if key in TORCHRUN_VARIABLES and where.line() is not None:
                SET_BY_SCRIPT.add(key)
            return real(self, key, value)
        return __setitem__

    patching.wrap(os._Environ, "__setitem__", make_setitem)
    patching.wrap(mp_process.BaseProcess, "start", make_start)
    patching.wrap(mp_process.BaseProcess, "run", make_run)


def start_spawned() -> None:
    """At the start of a spawned interpreter (``sitecustomize``): watch it before it imports
    the script again as ``__mp_main__`` (a name imported there, ``from torch.distributed import
    init_process_group``, is bound at that moment)."""
    from ddplab.doctor.ranks.instrument import READER_DIR, install

    patch_process()
    _recorder.reset().counters["fresh"] = 1
    install(os.environ[READER_DIR])


def _run_child(process, real):
    import sys

    from ddplab.doctor.ranks.instrument import READER_DIR, install, outcome_of
    from ddplab.engine.lifeline import exit_with_parent

    exit_with_parent()
    rec = _recorder.RECORDER
    if not rec.counters.get("fresh"):  # a forked child: its parent's recorder, reset
        rec = _recorder.reset()
        install(os.environ[READER_DIR])
    recorded = None
    target_module = getattr(process._target, "__module__", "")
    if target_module == "torch.multiprocessing.spawn" and process._args:
        recorded = _Recorded(process._args[0])
        process._args = (recorded, *process._args[1:])
    done = outcome_of(lambda: real(process))
    if done.outcome == records.Outcome.CRASHED and recorded is not None and recorded.crash:
        done = dataclasses.replace(done, crash=recorded.crash)
    rec.publish(done)
    if rec.store is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        rec.wait_for_release()
    if done.outcome == records.Outcome.CRASHED:
        raise SystemExit(1)
