"""Every watcher, installed in one go, before the script runs (and again in a child process
that becomes a rank: a second install of a wrapper does nothing)."""

from __future__ import annotations

import os
import runpy
import sys
import traceback

import ddplab.doctor.records as records
from ddplab.doctor.ranks import cuda_on_cpu, scratch, where
from ddplab.doctor.ranks import recorder as _recorder
from ddplab.doctor.ranks.watch import amp as watch_amp
from ddplab.doctor.ranks.watch import batches as watch_batches
from ddplab.doctor.ranks.watch import collectives as watch_collectives
from ddplab.doctor.ranks.watch import data as watch_data
from ddplab.doctor.ranks.watch import ddp_collectives as watch_ddp_collectives
from ddplab.doctor.ranks.watch import files as watch_files
from ddplab.doctor.ranks.watch import group as watch_group
from ddplab.doctor.ranks.watch import iterables as watch_iterables
from ddplab.doctor.ranks.watch import model as watch_model
from ddplab.doctor.ranks.watch import prints as watch_prints
from ddplab.doctor.ranks.watch import schedules as watch_schedules
from ddplab.doctor.ranks.watch import seeds as watch_seeds
from ddplab.doctor.ranks.watch import steps as watch_steps

READER_DIR = "DDPLAB_DOCTOR_READER_DIR"
WATCHERS = (cuda_on_cpu, scratch, watch_group, watch_collectives, watch_ddp_collectives,
            watch_data, watch_model, watch_steps, watch_schedules, watch_amp, watch_files,
            watch_seeds, watch_prints, watch_batches)
ENDED_EPOCH = (StopIteration, ZeroDivisionError)  # what an empty epoch makes a script raise
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the doctor's package


def install(reader_dir: str) -> None:
    where.set_reader_dir(reader_dir)
    os.environ[READER_DIR] = where.reader_dir()
    for watcher in WATCHERS:
        watcher.install(*([where.reader_dir()] if watcher is scratch else []))


def readers_traceback(exc: BaseException) -> str:
    """The traceback without the doctor's own frames (its wrappers sit between the script and
    torch) and runpy's: what ``python train.py`` would have printed."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith(_HERE + os.sep) and "runpy" not in f.filename]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames),
             *traceback.format_exception_only(type(exc), exc)]
    return "".join(lines)


def stop_for(exc: BaseException) -> _recorder.DoctorStop | None:
    """The doctor's stop in place of what an epoch it ended made the script raise
    (``next(iter(loader))`` of an empty loader, an average over zero batches): the script is
    stopped there, as every rank is, not crashed."""
    if isinstance(exc, ENDED_EPOCH) and _recorder.RECORDER.draining is not None:
        said = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return _recorder.DoctorStop(f"the script could not run an epoch the doctor ended: "
                                    f"{said}")
    return None


def outcome_of(call) -> tuple[records.Outcome, dict]:
    """Run ``call()``; how it ended: ``finished``, ``stopped`` (the doctor's stop) or
    ``crashed`` (an exception, or a non-zero exit status, with the reader's traceback). Then
    the epochs of the IterableDatasets it trained on are counted (``watch.iterables``)."""
    ended = _outcome_of(call)
    watch_iterables.count()
    return ended


def _outcome_of(call) -> tuple[records.Outcome, dict]:
    try:
        call()
    except _recorder.DoctorStop as stop:
        return records.Outcome.STOPPED, {"why": str(stop)}
    except SystemExit as exc:
        if exc.code in (0, None):
            return records.Outcome.FINISHED, {}
        return records.Outcome.CRASHED, {
            "error": f"SystemExit({exc.code!r})",
            "traceback": f"the script exited with status {exc.code!r}\n"}
    except BaseException as exc:  # the script's own failure: reported, never re-raised here
        stop = stop_for(exc)
        if stop is not None:
            return records.Outcome.STOPPED, {"why": str(stop)}
        return records.Outcome.CRASHED, {
            "error": traceback.format_exception_only(type(exc), exc)[-1].strip(),
            "traceback": readers_traceback(exc)}
    return records.Outcome.FINISHED, {}


def run_script(script: str, args: list[str]) -> tuple[records.Outcome, dict]:
    """The script as ``python script.py args`` runs it: ``__main__``, its folder first on
    ``sys.path``, ``sys.argv`` its own."""
    folder = os.path.dirname(os.path.abspath(script))
    sys.argv = [script, *args]
    sys.path[0] = folder
    install(folder)
    ended = outcome_of(lambda: runpy.run_path(script, run_name="__main__"))
    trackers = scratch.trackers_used()
    if trackers:
        _recorder.RECORDER.add(records.Trackers(**trackers))
    return ended
