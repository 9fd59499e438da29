"""Every integer slider of every lab, moved in a real kernel: what each move costs.

    python benchmarks/all_sliders.py [labs/01_averaging.ipynb ...] [--moves 4]
                                     [--baseline REV] [--profile N] [--reading SECONDS]

Each lab runs top to bottom in a real kernel (this venv's ``python3``), from a folder that
holds only that notebook. Then every ``IntSlider`` the kernel holds (found by walking
ipywidgets' live widget objects, so no cell index is named here) is moved one step and back,
``--moves`` times in all, from the kernel: setting ``value`` runs the panel's own observer,
the real run and the draw, as a person's move does (less the trip to the page, which
``scripts/lab_in_browser.py`` times). It prints each slider's median move in ms, with the
run/draw split its panel reports (of the moves that ran), how many moves were shown from what
the panel kept (a move back, to a value shown before: ``ddplab.screen.ahead``), and the share
of sliders at or under 150 ms.

After each lab it prints that lab's share of sliders within the goal (and, with a baseline,
the baseline's), then the share over every lab.

``--reading SECONDS`` moves as a reader who reads each figure: it waits until the lab has
run and then SECONDS before the first move, and SECONDS after each figure before the next,
while the kernel runs ahead the values next to each slider (``ddplab.screen.ahead``). Each
move is the message the page sends (a ``comm_msg`` that sets the slider's value, not a cell:
a cell would pause the running ahead), one step on in the same direction, turning at the
slider's end, so each is a value not shown before. Its time runs from sending the message to
the kernel going idle after it. Per slider it prints how many moves were answered from what
was run ahead, kept from before, or run, and the kernel's own time for them (the status line's
"shown in" or "drawn in"); per lab, the moves answered from what was run ahead and their
times. Without ``--reading`` the moves are today's: at once, one step and back, from a cell.

``--no-ahead`` sets ``DDPLAB_AHEAD=0`` in this checkout's kernel: nothing is run ahead or
kept, so every move runs, as before ``screen.ahead``: with ``--baseline``, runs against runs.
Running ahead on, this checkout's kernel is idle while the baseline's moves, often long enough
to start a run ahead, and its next move (a cell) then first waits for that call to end.

``--baseline REV`` runs a second kernel on ``src/`` as of git revision REV and moves its
sliders alternately with this checkout's, move by move, so that both see the same load on a
shared machine: the ratio column is baseline over now. ``--profile N`` profiles N moves of
each slider with cProfile in the kernel and prints where the time went.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lab_kernel import ROOT, Kernel, close, lab_folder, source_at  # noqa: E402

LIMIT_MS = 150


def profile(kernel: Kernel, i: int, moves: int) -> str:
    return kernel.run(
        "import cProfile, io, pstats\n_p = cProfile.Profile()\n_p.enable()\n"
        f"for _k in range({moves}): _bench_move({i}, _k)\n_p.disable()\n"
        "_s = io.StringIO(); pstats.Stats(_p, stream=_s).sort_stats('cumulative')"
        ".print_stats(25); print(_s.getvalue()[-6000:])")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labs", nargs="*", default=sorted(glob.glob(f"{ROOT}/labs/*.ipynb")))
    parser.add_argument("--moves", type=int, default=4)
    parser.add_argument("--baseline", help="a git revision to compare with, move by move")
    parser.add_argument("--profile", type=int, default=0, help="moves per slider to profile")
    parser.add_argument("--installed", action="store_true",
                        help="the kernel imports the ddplab installed in its Python, not src/")
    parser.add_argument("--no-ahead", action="store_true",
                        help="nothing run ahead or kept in this checkout's kernel "
                             "(DDPLAB_AHEAD=0): every move runs, as before")
    parser.add_argument("--reading", type=float, default=0.0, metavar="SECONDS",
                        help="wait as a reader would after each figure (e.g. 3), moving by "
                             "the page's messages; 0: today's moves, at once")
    args = parser.parse_args()
    if args.reading:
        if args.baseline or args.profile or args.no_ahead:
            parser.error("--reading moves one kernel, running ahead: no --baseline, "
                         "--profile or --no-ahead with it")
        reading(args)
        return
    base_src = source_at(args.baseline) if args.baseline else None
    rows = []
    head = f"{'lab':<16} {'slider':<30} {'ms':>6} {'run':>5} {'draw':>5} {'kept':>4}"
    print(head + (f" {'base ms':>8} {'ratio':>6}" if base_src else ""))
    for lab in args.labs:
        name = os.path.basename(lab)[:-6]
        kernels = [Kernel(lab_folder(lab), pythonpath="" if args.installed else f"{ROOT}/src",
                          ahead=not args.no_ahead)]
        if base_src:
            kernels.append(Kernel(lab_folder(lab), pythonpath=base_src))
        lab_rows, lab_base = [], []
        try:
            sliders = [k.run_lab(lab) for k in kernels]
            for i, slider in enumerate(sliders[0]):
                if base_src and slider not in sliders[1]:
                    continue
                moves = [[], []]
                for k in range(args.moves):
                    for which, kernel in enumerate(kernels):
                        j = i if which == 0 else sliders[1].index(slider)
                        moves[which].append(kernel.move(j, k))
                ms = statistics.median(m for m, _, _ in moves[0])
                splits = [s for _, s, _ in moves[0] if s]
                run = statistics.median(s[0] for s in splits) if splits else float("nan")
                draw = statistics.median(s[1] for s in splits) if splits else float("nan")
                kept = sum(k for _, _, k in moves[0])  # shown from what the panel kept
                line = f"{name:<16} {slider:<30} {ms:6.0f} {run:5.0f} {draw:5.0f} {kept:4d}"
                if base_src:
                    base = statistics.median(m for m, _, _ in moves[1])
                    line += f" {base:8.0f} {base / ms:5.1f}x"
                    lab_base.append(base)
                print(line, flush=True)
                rows.append(ms)
                lab_rows.append(ms)
                if args.profile:
                    print(profile(kernels[0], i, args.profile))
            print(f"{name:<16} {share(lab_rows)}"
                  + (f"; baseline {share(lab_base)}" if base_src else ""), flush=True)
        finally:
            close(kernels)
    if base_src:
        shutil.rmtree(os.path.dirname(base_src), ignore_errors=True)
    print(f"all labs: {share(rows)}")


def source_of(status: str) -> str:
    """Where a move's figure came from, by its panel's status line (``screen.ahead``)."""
    if "run ahead while you read" in status:
        return "ahead"
    if "kept from before" in status:
        return "kept"
    return "ran" if "real DDP run and drawn in" in status else "error"


def kernel_ms(status: str) -> float:
    """The kernel's own time for a move, from its status line."""
    found = re.search(r"(?:shown|drawn) in (\d+) ms", status)
    return float(found.group(1)) if found else float("nan")


def reading(args) -> None:
    """``--reading``: each lab's sliders moved one step on at a time, SECONDS apart."""
    print(f"{'lab':<16} {'slider':<30} {'ms':>6} {'kernel':>6}  ahead kept  ran  (median ms "
          f"from the message to idle; the kernel's own)")
    rows, everywhere = [], []
    for lab in args.labs:
        name = os.path.basename(lab)[:-6]
        kernel = Kernel(lab_folder(lab), pythonpath="" if args.installed else f"{ROOT}/src")
        lab_moves, lab_rows = [], []
        try:
            sliders = kernel.run_lab(lab)
            time.sleep(args.reading)  # the reader reads before the first move too
            for i, slider in enumerate(sliders):
                ids, direction, moves = kernel.ids[i], 1, []
                for _ in range(args.moves):
                    if not ids["min"] <= ids["value"] + direction * ids["step"] <= ids["max"]:
                        direction = -direction
                    ids["value"] += direction * ids["step"]
                    ms, status = kernel.send_move(i, ids["value"])
                    moves.append((ms, kernel_ms(status), source_of(status)))
                    time.sleep(args.reading)
                counts = [sum(m[2] == what for m in moves) for what in ("ahead", "kept", "ran")]
                ms = statistics.median(m[0] for m in moves)
                print(f"{name:<16} {slider:<30} {ms:6.0f} "
                      f"{statistics.median(m[1] for m in moves):6.0f}  "
                      f"{counts[0]:5d} {counts[1]:4d} {counts[2]:4d}", flush=True)
                lab_rows.append(ms)
                lab_moves += moves
        finally:
            close([kernel])
        rows += lab_rows
        everywhere += lab_moves
        print(f"{name:<16} {answered(lab_moves)}; {share(lab_rows)}", flush=True)
    print(f"all labs: {answered(everywhere)}; {share(rows)}")


def answered(moves: list) -> str:
    """The moves answered from what was run ahead, and their times, as a line."""
    ahead = [ms for ms, _, source in moves if source == "ahead"]
    ran = [ms for ms, _, source in moves if source == "ran"]
    line = f"{len(ahead)} of {len(moves)} moves answered from what was run ahead"
    if ahead:
        line += f" (median {statistics.median(ahead):.0f} ms, max {max(ahead):.0f})"
    if ran:
        line += f", {len(ran)} ran (median {statistics.median(ran):.0f} ms)"
    return line


def share(times: list) -> str:
    """How many of ``times`` (ms) are within the goal, as a line."""
    within = sum(ms <= LIMIT_MS for ms in times)
    return (f"{within} of {len(times)} sliders at or under {LIMIT_MS} ms "
            f"({100 * within / max(len(times), 1):.0f}%)")


if __name__ == "__main__":
    main()
