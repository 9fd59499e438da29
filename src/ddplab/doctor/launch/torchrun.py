"""``torchrun ... -m ddplab doctor train.py [args]``: every process torchrun started runs the
script itself, watched as the doctor's own ranks are, and joins the script's group through
torchrun's rendezvous (the doctor changes nothing there: no backend is swapped where NCCL
runs). Evidence goes to torchrun's store under the doctor's prefix.

Rank 0 judges: after its own run it waits for every rank's report (``launcher.watch``) and
prints the diagnosis; if a rank hangs, rank 0's watchdog thread does it (rank 0 itself may be
the one stuck in a collective), tells every rank to end, and exits 1. If rank 0's process is
gone without a report (gloo ends a process from its own thread when a collective meets a
different one on another rank), the first other rank to see it (its pid gone on this host, or
torchrun's SIGTERM, which leaves 30 seconds before its SIGKILL) judges in its place, reading
rank 0's collective ledger from the store as the doctor's own runs do.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import sys
import time

import ddplab.doctor.records as records
from ddplab.doctor.judging.evidence import Evidence
from ddplab.doctor.launch import launcher
from ddplab.doctor.launch.inputs import check_numbers, check_script
from ddplab.doctor.launch.zygote import preload
from ddplab.doctor.messages import Hello, LauncherDone, Run, Signal
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
    rec.abort_on_signal = True
    if rank == 0:
        rec.on_alarm = lambda store: _judge_and_exit(store, settings, args, show)
    done = run_script(args.script, args.script_args)
    scratch.stop()
    if rec.store is None:  # it never joined a group: rank 0 says so (no-process-group)
        result = Run(mode=records.Mode.NONE, world_size=settings.world_size,
                     launcher=LauncherDone(**vars(dataclasses.replace(done,
                                                                      records=rec.records))))
        return _report(result, args, show) if rank == 0 else 1
    rec.publish(done)
    if rank != 0:
        return _wait_or_judge(rec.store, settings, args)
    rec.on_alarm = None  # from here the main thread watches
    rec.store.add(JUDGE)
    result = launcher.watch(rec.store, settings)
    rec.store.signal(Signal.RELEASE)
    shutil.rmtree(os.environ[SCRATCH], ignore_errors=True)  # every rank is done with it
    if result.hang:
        rec.store.signal(Signal.ABORT)
    return _report(result, args, show)


JUDGE = str(Signal.JUDGE)  # the first to add 1 here judges: rank 0, or a rank in its place


def _wait_or_judge(store, settings, args) -> int:
    """A rank other than 0, after its run: wait for rank 0's release, or judge in its place if
    rank 0's process is gone first."""
    stopped, judged = [], False
    previous = signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    try:
        while not store.signalled(Signal.RELEASE):  # polled: a timed-out store wait warns
            time.sleep(0.5)
            if (judged or not (stopped or _first_gone(store))
                    or store.signalled(Signal.RELEASE)):
                if stopped:
                    return 1  # torchrun ends the run, and another rank judges it
                continue
            judged = True  # the first to see rank 0 gone judges; the others go on waiting
            if store.add(JUDGE) == 1:
                result = launcher.watch(store, settings, lambda: True)
                store.signal(Signal.RELEASE)
                shutil.rmtree(os.environ[SCRATCH], ignore_errors=True)
                return _report(result, args, show)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _first_gone(store) -> bool:
    """Rank 0's process ran on this host and has ended (a zombie counts: torchrun reaps it
    later)."""
    hello = store.read(Hello, 0)
    if not hello or hello.host != socket.gethostname():
        return False
    try:
        os.kill(hello.pid, 0)
        with open(f"/proc/{hello.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except ProcessLookupError:
        return True
    except OSError:
        return False


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

    diagnosis = diagnosis_of(args.script, Evidence(result))
    show(diagnosis, args)
    return diagnosis.exit_code()


def _judge_and_exit(store, settings, args, show) -> None:
    """Rank 0's watchdog thread, after an alarm: its own position, then the same watch as the
    main thread's (which sees the alarm, calls the roll and collects), the judgement, the end
    of every rank."""
    scratch.stop()
    rec = _recorder.RECORDER
    store.add(JUDGE)
    store.send(rec.position(), rec.rank)  # its own answer: its main thread is the one stuck
    code = _report(launcher.watch(store, settings), args, show)
    store.signal(Signal.ABORT)
    sys.stdout.flush()
    os._exit(code)
