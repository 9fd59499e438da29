"""``torchrun ... -m ddplab doctor train.py [args]``: every process torchrun started runs the
script itself, watched as the doctor's own ranks are, and joins the script's group through
torchrun's rendezvous (the doctor changes nothing there: no backend is swapped where NCCL
runs). Evidence goes to torchrun's store under the doctor's prefix.

Rank 0 judges: after its own run it waits for every rank's report (``launcher.watch``) and
prints the diagnosis; if a rank hangs, rank 0's watchdog thread does it (rank 0 itself may be
the one stuck in a collective), tells every rank to end, and exits 1.
"""

from __future__ import annotations

import os
import shutil
import sys

import ddplab.doctor.records as records
from ddplab.doctor.judging.evidence import Evidence
from ddplab.doctor.launch import launcher
from ddplab.doctor.launch.inputs import check_numbers, check_script
from ddplab.doctor.launch.zygote import preload
from ddplab.doctor.ranks import recorder as _recorder
from ddplab.doctor.ranks import scratch
from ddplab.doctor.ranks.instrument import run_script
from ddplab.doctor.ranks.scratch import VARIABLE as SCRATCH
from ddplab.doctor.reporting.output import show
from ddplab.doctor.settings import Settings, world_size_for


def main(args) -> int:
    rank = int(os.environ["RANK"])
    try:
        check_script(args.script)
        check_numbers(world_size_for(None), args.steps, args.timeout)
    except ValueError as exc:
        if rank == 0:
            print(f"python -m ddplab doctor: error: {exc}", file=sys.stderr)
        return 2
    settings = Settings(world_size=world_size_for(None), steps=args.steps,
                        batches=args.batches, timeout=args.timeout)
    os.environ.update(settings.environment())  # read by the watchers this process installs
    os.environ.setdefault(SCRATCH, scratch_folder())
    preload()  # DDP's constructor imports dynamo: not a wait the timeout should count
    rec = _recorder.RECORDER
    rec.timeout = args.timeout
    rec.abort_on_signal = True
    if rank == 0:
        rec.on_alarm = lambda store: _judge_and_exit(store, settings, args, show)
    outcome, about = run_script(args.script, args.script_args)
    scratch.stop()
    if rec.store is None:  # it never joined a group: rank 0 says so (no-process-group)
        result = launcher.Run(mode=records.Mode.NONE, world_size=settings.world_size,
                              launcher=dict(about, outcome=outcome,
                                            records=records.dump(rec.records)))
        return _report(result, args, show) if rank == 0 else 1
    rec.publish(outcome, **about)
    if rank != 0:
        rec.wait_for_release()
        return 0
    rec.on_alarm = None  # from here the main thread watches
    result = launcher.watch(rec.store, settings)
    rec.store.put("release", 1)
    shutil.rmtree(os.environ[SCRATCH], ignore_errors=True)  # every rank is done with it
    if result.hang:
        rec.store.put("abort", 1)
    return _report(result, args, show)


def scratch_folder() -> str:
    """The folder the script's writes land in, one per torchrun run and node (its ranks read
    each other's files there); rank 0 removes it once every rank is done."""
    import tempfile

    run = os.environ.get("TORCHELASTIC_RUN_ID", "none").replace(os.sep, "_")
    folder = os.path.join(tempfile.gettempdir(), f"ddplab-doctor-{run}-scratch")
    os.makedirs(folder, exist_ok=True)
    return folder


def _report(result, args, show) -> int:
    from ddplab.doctor.launch.diagnose import diagnosis_of

    diagnosis = diagnosis_of(args.script, result, Evidence(result))
    show(diagnosis, args)
    return diagnosis.exit_code()


def _judge_and_exit(store, settings, args, show) -> None:
    """Rank 0's watchdog thread, after an alarm: roll call, judgement, the end of every rank."""
    import json

    scratch.stop()
    rec = _recorder.RECORDER
    store.raw.set(f"where/{rec.rank}", json.dumps(rec.position(), default=str))  # its own
    result = launcher.Run(mode=records.Mode.RANKS, world_size=settings.world_size)
    expected = range(settings.world_size)
    for rank in expected:
        if store.has(f"done/{rank}"):
            result.outcomes[rank] = store.get(f"done/{rank}")
    result.hang = {"alarm": store.get("alarm"),
                   "positions": launcher.roll_call(store, result, expected)}
    launcher.collect(store, result, expected)
    code = _report(result, args, show)
    store.put("abort", 1)
    sys.stdout.flush()
    os._exit(code)
