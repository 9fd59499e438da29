"""``python -m ddplab doctor``: the command line of :mod:`ddplab.doctor`.

    python -m ddplab doctor [--world-size N] [--steps K] [--format text|json|github|sarif] \\
        [--out DIR] [--timeout S] [--book-url URL] train.py [script args]
    torchrun --nproc-per-node N -m ddplab doctor train.py [script args]

The doctor's options come before the script; everything after the script is the script's
own (as with torchrun). Exit 0: no error found; 1: an error found (or a hang); 2: bad input
(a missing file, a folder, a syntax error) or a script that fails on its own (its traceback
is shown; for an exit with an error status, such as argparse's, the last lines it printed). A
doctor's option given after the script is the script's: where the script then fails, the
doctor says so.
"""

from __future__ import annotations

import argparse
import os
import sys

from ddplab.doctor.reporting import output
from ddplab.doctor.settings import DEFAULTS, world_size_for

HELP = "run your training script on instrumented ranks and name its DDP mistakes"


def parser() -> argparse.ArgumentParser:
    """The doctor's own parser: ``python -m ddplab doctor`` builds no other (it loads no
    chapter: its ranks run the reader's script, not the book's)."""
    top = argparse.ArgumentParser(prog="python -m ddplab doctor", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(top)
    return top


def run(argv) -> int:
    """``python -m ddplab doctor ARGV``; the exit status."""
    return main(parser().parse_args(argv))


def add_arguments(sub) -> None:

    sub.add_argument("--world-size", type=int, default=None,
                     help="ranks to start (default 2; under torchrun: torchrun's)")
    sub.add_argument("--steps", type=int, default=DEFAULTS.steps,
                     help=f"training ends on every rank after this many optimizer steps "
                          f"(default {DEFAULTS.steps}), or after the epochs they need at "
                          "--batches a pass (two at least): each epoch left gets one batch, "
                          "so its evaluation and the script's end still run")
    sub.add_argument("--batches", type=int, default=DEFAULTS.batches,
                     help=f"training batches per epoch the run goes through (default "
                          f"{DEFAULTS.batches})")
    sub.add_argument("--timeout", type=float, default=DEFAULTS.timeout,
                     help=f"seconds a rank may wait in a collective before it is a hang "
                          f"(default {DEFAULTS.timeout:g})")
    sub.add_argument("--format", choices=output.FORMATS, default="text",
                     help="the diagnosis as text (default), JSON, GitHub workflow annotations "
                          "(::error file=...,line=...::) or SARIF 2.1.0 (code scanning)")
    sub.add_argument("--json", action="store_const", dest="format", const="json",
                     help="the same as --format json")
    sub.add_argument("--out", default=None, metavar="DIR",
                     help="also write DIR/doctor.html (one self-contained page) and "
                          "DIR/doctor.json")
    sub.add_argument("--book-url", default=None, metavar="URL",
                     help="the built book the links point at (default: DDPLAB_BOOK_URL, else "
                          "the repository's GitHub Pages site)")
    sub.add_argument("script", help="the training script, run as `python script.py` would")
    sub.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's arguments")


def main(args) -> int:
    from ddplab.doctor.launch.diagnose import diagnose
    from ddplab.engine.torchrun import under_torchrun

    if args.book_url:  # read by every link the diagnosis makes (ddplab.common.home)
        os.environ["DDPLAB_BOOK_URL"] = args.book_url
    if under_torchrun():
        from ddplab.doctor.launch import torchrun

        return torchrun.main(args)
    try:
        diagnosis = diagnose(args.script, args.script_args,
                             world_size=world_size_for(args.world_size), steps=args.steps,
                             timeout=args.timeout, batches=args.batches)
    except ValueError as exc:  # bad input: nothing started
        print(f"python -m ddplab doctor: error: {exc}", file=sys.stderr)
        return 2
    output.show(diagnosis, args)
    misplaced = misplaced_options(args.script_args)
    if diagnosis.exit_code() == 2 and misplaced:
        from ddplab.doctor.reporting.text import wrapped

        said = (f"python -m ddplab doctor: {' '.join(misplaced)} went to the script: the "
                f"doctor's options come before the script (python -m ddplab doctor "
                f"{' '.join(misplaced)} {args.script} ...)")
        print("\n".join(wrapped(said)), file=sys.stderr)
    return diagnosis.exit_code()


def misplaced_options(script_args) -> list[str]:
    """The doctor's own options among the script's arguments, as given (read from its parser:
    option -> whether it takes a value)."""
    takes_value = {name: action.nargs != 0 for action in parser()._actions
                   if action.dest != "help" for name in action.option_strings}
    found = []
    for i, arg in enumerate(script_args):
        name = arg.split("=", 1)[0]
        if name in takes_value:
            found += script_args[i:i + 2] if takes_value[name] and "=" not in arg else [arg]
    return found
