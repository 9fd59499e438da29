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
import dataclasses
import json
import os
import sys
from collections.abc import Callable

from ddplab import chapters
from ddplab.common.results import to_json
from ddplab.engine.cluster import DEFAULT_TIMEOUT
from ddplab.engine.forkserver import prestart
from ddplab.engine.placement import BACKENDS, DEVICES, placed, range_of
from ddplab.engine.torchrun import is_reporting_process, launched_world_size, under_torchrun


@dataclasses.dataclass(frozen=True)
class Command:
    """One command of ``python -m ddplab``: its name, its help and description, its own
    options (``add_arguments(parser)``) and what runs it (``main(args) -> exit status``), and
    which of the shared options it takes (declared once, in :func:`add_shared`)."""

    name: str
    help: str
    description: str
    add_arguments: Callable
    main: Callable
    world_size: bool = True  # --world-size: 2 unless under torchrun, where it is torchrun's
    placement: bool = True  # --backend and --device
    timeout: float | None = DEFAULT_TIMEOUT  # --timeout's default; None: no --timeout
    json: bool = True  # --json


def add_shared(sub: argparse.ArgumentParser, command: Command) -> None:
    """The options every command that takes them takes alike."""
    if command.world_size:
        sub.add_argument("--world-size", type=int, default=None,
                         help="number of ranks (default 2; under torchrun: torchrun's)")
    if command.placement:
        sub.add_argument("--backend", choices=BACKENDS, default="auto",
                         help="auto: DDPLAB_BACKEND, else nccl with a GPU for each rank, else "
                              "gloo (default auto)")
        sub.add_argument("--device", choices=DEVICES, default="auto",
                         help="auto: DDPLAB_DEVICE, else cuda under nccl, else cpu; cuda with "
                              "gloo puts every rank on the GPUs, rank r on cuda:(r %% GPUs)")
    if command.timeout is not None:
        sub.add_argument("--timeout", type=float, default=command.timeout,
                         help=f"seconds before a silent rank is an error (default "
                              f"{command.timeout:g})")
    if command.json:
        sub.add_argument("--json", action="store_true", help="print JSON")


def commands() -> dict[str, Command]:
    """Every command, by name: each chapter's experiment, then ``exercise``, ``report`` and
    ``doctor``."""
    from ddplab import exercises
    from ddplab.doctor.launch import command as doctor
    from ddplab.report import command as report

    found = {name: experiment(name, module) for name, module in chapters.commands().items()}
    found["exercise"] = Command(
        "exercise", "check your solution of an exercise on real ranks",
        "Check a solution on real ranks against real DDP or torch. Exit 0: passed; 1: wrong; "
        "2: the file cannot be used.", add_exercise_arguments, exercise_main, placement=False,
        timeout=exercises.DEFAULT_TIMEOUT)
    found["report"] = Command("report", report.HELP, report.__doc__, report.add_arguments,
                              report.main, timeout=report.DEFAULT_TIMEOUT)
    # The doctor declares its own options (its parser serves `python -m ddplab doctor`).
    found["doctor"] = Command("doctor", doctor.HELP, doctor.__doc__, doctor.add_arguments,
                              doctor.main, world_size=False, placement=False, timeout=None,
                              json=False)
    return found


def experiment(name: str, module) -> Command:
    """A chapter module's command: its ``run`` with the options' values, placed once."""
    return Command(name, module.__doc__.splitlines()[0], module.__doc__,
                   getattr(module, "add_arguments", lambda sub: None),
                   lambda args: experiment_main(module, args))


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m ddplab", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    subs = top.add_subparsers(dest="command", required=True, metavar="EXPERIMENT")
    for command in commands().values():
        sub = subs.add_parser(command.name, help=command.help, description=command.description,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
        add_shared(sub, command)
        command.add_arguments(sub)
    return top


def add_exercise_arguments(sub) -> None:
    from ddplab import exercises

    sub.add_argument("name", choices=list(exercises.EXERCISES), metavar="NAME",
                     help=", ".join(f"{n}: {e.function}" for n, e in exercises.EXERCISES.items()))
    sub.add_argument("--solution", required=True, metavar="FILE.py",
                     help="a file that defines the function (or class) the exercise names")


def exercise_main(args) -> int:
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


def experiment_main(module, args) -> int:
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


def bad_input(args, exc: Exception) -> int:
    """One clear line and exit status 2, as argparse does for a malformed argument; the usage
    text it would print first says nothing about a value out of range."""
    print(f"python -m ddplab {args.command}: error: {exc}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["doctor"]:  # its own parser: it loads no chapter (its ranks run the
        from ddplab.doctor.launch import command as doctor  # reader's script, not the book's)

        return doctor.run(argv[1:])
    prestart()  # every other command runs ranks: their torch import overlaps the chapters'
    args = parser().parse_args(argv)
    if getattr(args, "world_size", 0) is None:
        args.world_size = launched_world_size() if under_torchrun() else 2
    return commands()[args.command].main(args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `python -m ddplab ... | head`: the reader has read enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error
        sys.exit(1)
