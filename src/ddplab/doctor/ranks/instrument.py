"""Every watcher, installed in one go, before the script runs (and again in a child process
that becomes a rank: a second install of a wrapper does nothing)."""

from __future__ import annotations

import os
import runpy
import sys

import ddplab.doctor.records as records
from ddplab.doctor.messages import Done
from ddplab.doctor.ranks import crashes, cuda_on_cpu, scratch, where
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


def install(reader_dir: str) -> None:
    where.set_reader_dir(reader_dir)
    os.environ[READER_DIR] = where.reader_dir()
    for watcher in WATCHERS:
        watcher.install(*([where.reader_dir()] if watcher is scratch else []))


def outcome_of(call) -> Done:
    """Run ``call()``; how it ended: ``finished``, ``stopped`` (the doctor's stop, with why) or
    ``crashed`` (an exception, or a non-zero exit status, recorded as a ``Crash``). Then the
    epochs of the IterableDatasets it trained on are counted (``watch.iterables``)."""
    ended = _outcome_of(call)
    watch_iterables.count()
    return ended


def _outcome_of(call) -> Done:
    try:
        call()
    except _recorder.DoctorStop as stop:
        return Done(records.Outcome.STOPPED, why=str(stop))
    except SystemExit as exc:
        if exc.code in (0, None):
            return Done(records.Outcome.FINISHED)
        return Done(records.Outcome.CRASHED, crash=crashes.exit_crash(exc.code))
    except BaseException as exc:  # the script's own failure: reported, never re-raised here
        return Done(records.Outcome.CRASHED, crash=crashes.crash_of(exc))
    return Done(records.Outcome.FINISHED)


def run_script(script: str, args: list[str]) -> Done:
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
