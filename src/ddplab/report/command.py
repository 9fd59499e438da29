"""``python -m ddplab report``: the command line of :mod:`ddplab.report`.

    python -m ddplab report --world-size 2 [--out DIR] [--quick] [--json]
    torchrun --nnodes N --nproc-per-node G [rendezvous args] -m ddplab report [--out DIR]

Exit 0 with both files written; 1 when a stage failed (a rank raised, died or never arrived:
the files still say what was measured and what is missing); 2 on bad input, too little memory
included, before any rank trains.
"""

from __future__ import annotations

import json
import sys
import time

from ddplab.engine.torchrun import is_reporting_process

HELP = "measure this cluster and set the book's model beside each figure"
DEFAULT_TIMEOUT = 120.0  # s: a stage's runs are longer than a chapter command's


def add_arguments(sub) -> None:
    """The report's own options (``python -m ddplab`` adds the shared ones)."""
    from ddplab.report.settings import DEFAULT_PARAMS_MILLIONS

    sub.add_argument("--out", default="ddplab-report",
                     help="folder for report.html and report.json (default ddplab-report)")
    sub.add_argument("--params-millions", type=float, default=None,
                     help=f"the step's model, M parameters (default {DEFAULT_PARAMS_MILLIONS}, "
                          f"the chapter 'The time cost''s)")
    sub.add_argument("--quick", action="store_true",
                     help="fewer sizes, repeats and configurations (for CI)")


class Progress:
    """Rank 0's progress on stderr: one line rewritten in place on a terminal, one line per
    stage otherwise (a log file, CI)."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.terminal = self.stream.isatty()
        self.start = time.perf_counter()

    def __call__(self, done: int, total: int, label: str) -> None:
        line = (f"ddplab report: [{done}/{total}] {label} "
                f"({time.perf_counter() - self.start:.0f} s)")
        if self.terminal:
            end = "\n" if done == total else ""
            self.stream.write(f"\r\033[K{line}{end}")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def main(args, progress=None) -> int:
    """Run the report for parsed ``args``; ``progress`` replaces the stderr lines (tests)."""
    from ddplab import report
    from ddplab.engine.placement import placed, range_of
    from ddplab.engine.torchrun import launched_world_size, under_torchrun
    from ddplab.report.stages.machine import NotEnoughMemory

    reporting = is_reporting_process()
    try:
        # every stage's runs on one placement, set once before the first; the report's world
        # size is the largest any stage asks for
        world_size = args.world_size
        if world_size is None:
            world_size = launched_world_size() if under_torchrun() else 2
        with placed(args.backend, args.device, largest_world_size=range_of(world_size)):
            made = report.run(world_size, args.params_millions, args.quick, args.timeout,
                              progress=(progress or Progress()) if reporting else None)
    except (ValueError, TypeError) as exc:  # bad input or too little memory: nothing measured
        if reporting:  # NotEnoughMemory's message starts "too little memory"
            kind = "" if isinstance(exc, NotEnoughMemory) else "error: "
            print(f"python -m ddplab report: {kind}{exc}", file=sys.stderr)
        return 2
    paths = made.write(args.out)
    if reporting:
        print(json.dumps(made.to_json(), indent=1) if args.json else made.describe())
        where = f"{paths['html']} and {paths['json']}"
        if made.failure:
            print(f"python -m ddplab report: {made.failure}\nthe partial report is in {where}",
                  file=sys.stderr)
        else:
            print(f"report written: {where}", file=sys.stderr if args.json else sys.stdout)
    return 1 if made.failure else 0
