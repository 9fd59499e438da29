"""Command line: run an experiment on a local warm pool, or on every rank under torchrun.

    python -m ddplab check --world-size 4 [--json]
    torchrun --nproc-per-node 4 -m ddplab check [--json]

Locally, ``--world-size`` sets the number of rank processes (default 2); under torchrun it is
torchrun's and need not be given. Only rank 0 prints under torchrun. ``--backend`` and
``--device`` say where every rank of the command runs, set once for the process before the
command starts (``ddplab.placed``; default: auto, as ``DDPLAB_BACKEND`` / ``DDPLAB_DEVICE``
say, else NCCL on CUDA where there is a GPU for each of the ``--world-size`` ranks, gloo on CPU
otherwise); the JSON records both. ``--backend gloo --device cuda`` runs every rank's tensors
on one GPU.

Three commands are not a chapter's experiment: ``report`` measures your cluster and sets the
book's cost model beside each figure (``ddplab.report``), ``exercise`` checks a solution of
yours on real ranks, and ``doctor`` runs your own training script on instrumented ranks and
names its DDP mistakes (``ddplab.doctor``).

    python -m ddplab report --world-size 2 [--out DIR] [--quick] [--json]
    torchrun --nnodes N --nproc-per-node G [rendezvous args] -m ddplab report [--out DIR]

    python -m ddplab exercise average-gradients --solution mine.py [--world-size N] [--json]

It exits 0 when the solution passes, 1 when it is wrong (or hangs), 2 when the file cannot be
used (a syntax error, or the function it must define is missing).

    python -m ddplab doctor [--world-size N] [--steps K] [--json] [--out DIR] train.py [args]
    torchrun --nproc-per-node N -m ddplab doctor train.py [args]

It exits 0 when no error is found, 1 when one is, 2 on bad input or a script that fails on
its own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ddplab import chapters
from ddplab.common.results import to_json
from ddplab.engine.cluster import DEFAULT_TIMEOUT
from ddplab.engine.forkserver import prestart
from ddplab.engine.placement import BACKENDS, DEVICES, placed, range_of
from ddplab.engine.torchrun import is_reporting_process, under_torchrun


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m ddplab", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", required=True, metavar="EXPERIMENT")
    for name, module in chapters.commands().items():
        sub = commands.add_parser(name, help=module.__doc__.splitlines()[0],
                                  description=module.__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        sub.add_argument("--world-size", type=int, default=None,
                         help="number of ranks (default 2; under torchrun: torchrun's)")
        sub.add_argument("--backend", choices=BACKENDS, default="auto",
                         help="auto: DDPLAB_BACKEND, else nccl with a GPU for each rank, else "
                              "gloo (default auto)")
        sub.add_argument("--device", choices=DEVICES, default="auto",
                         help="auto: DDPLAB_DEVICE, else cuda under nccl, else cpu; cuda with "
                              "gloo puts every rank on the GPUs, rank r on cuda:(r %% GPUs)")
        sub.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                         help=f"seconds before a silent rank is an error (default "
                              f"{DEFAULT_TIMEOUT:g})")
        sub.add_argument("--json", action="store_true", help="print JSON")
        if hasattr(module, "add_arguments"):
            module.add_arguments(sub)
    add_exercise_command(commands)
    report_command().add_command(commands)
    doctor_command().add_command(commands)
    return top


def report_command():
    from ddplab.report import command

    return command


def doctor_command():
    from ddplab.doctor.launch import command

    return command


def add_exercise_command(commands) -> None:
    """``exercise NAME --solution FILE.py``: the one command that is not a chapter's."""
    from ddplab import exercises

    sub = commands.add_parser("exercise", help="check your solution of an exercise on real ranks",
                              description="Check a solution on real ranks against real DDP or "
                              "torch. Exit 0: passed; 1: wrong; 2: the file cannot be used.")
    sub.add_argument("name", choices=list(exercises.EXERCISES), metavar="NAME",
                     help=", ".join(f"{n}: {e.function}" for n, e in exercises.EXERCISES.items()))
    sub.add_argument("--solution", required=True, metavar="FILE.py",
                     help="a file that defines the function (or class) the exercise names")
    sub.add_argument("--world-size", type=int, default=2, help="ranks (default 2)")
    sub.add_argument("--timeout", type=float, default=exercises.DEFAULT_TIMEOUT,
                     help="seconds before a case that has not finished is a hang "
                          f"(default {exercises.DEFAULT_TIMEOUT:g})")
    sub.add_argument("--json", action="store_true", help="print JSON")


def exercise_main(cli, args) -> int:
    from ddplab import exercises

    try:
        solution = exercises.checker.load_solution(args.solution,
                                                   exercises.exercise(args.name).function)
    except exercises.Unusable as exc:
        print(json.dumps({"passed": False, "message": str(exc)}) if args.json else exc,
              file=sys.stdout if args.json else sys.stderr)
        return 2
    try:
        verdict = exercises.check(args.name, solution, args.world_size, args.timeout)
    except (ValueError, TypeError) as exc:  # bad input, caught before any rank started
        return bad_input(args, exc)
    print(json.dumps(to_json(verdict.to_json()), indent=1) if args.json else verdict)
    return 0 if verdict.passed else 1


def bad_input(args, exc: Exception) -> int:
    """One clear line and exit status 2, as argparse does for a malformed argument; the usage
    text it would print first says nothing about a value out of range."""
    print(f"python -m ddplab {args.command}: error: {exc}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["doctor"]:  # loads no chapter: its ranks run the reader's script
        return doctor_command().run(argv[1:])
    prestart()  # every other command runs ranks: their torch import overlaps the chapters'
    cli = parser()
    args = cli.parse_args(argv)
    if args.command == "exercise":
        return exercise_main(cli, args)
    if args.command == "report":
        return report_command().main(args)
    if args.command == "doctor":
        return doctor_command().main(args)
    if args.world_size is None:
        args.world_size = int(os.environ["WORLD_SIZE"]) if under_torchrun() else 2
    module = chapters.commands()[args.command]
    params = {k: v for k, v in vars(args).items()
              if k not in ("command", "json", "backend", "device")}
    try:
        # Where every rank of the command runs, set once, before anything else: each driver
        # runs where the process is placed. The command's world size is the largest it asks.
        with placed(args.backend, args.device, largest_world_size=range_of(args.world_size)):
            result = module.run(**params)
    except ValueError as exc:  # bad input, caught before any rank started
        return bad_input(args, exc)
    data = result.to_json()
    if is_reporting_process():
        print(json.dumps(to_json(data), indent=1) if args.json else result.describe())
    return 0 if data.get("ok", True) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `python -m ddplab ... | head`: the reader has read enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error
        sys.exit(1)
