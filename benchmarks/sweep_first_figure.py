"""A sweep panel's slider moves, in a real kernel: when the first figure comes, when the last.

    python benchmarks/sweep_first_figure.py labs/03_lr_scaling.ipynb [--moves 4]
                                            [--baseline REV]

A sweep panel (``widgets.explore_sweep``: a progress bar above a panel) fills its figure in run
by run, so a move has two times: from the move to its first figure (the first run drawn, goal
150 ms) and to its end (the whole sweep drawn, goal 2 s). ``all_sliders.py`` times
the end only. Like it, this runs the lab top to bottom in a real kernel, finds the sweep panels
among the kernel's live widgets, and moves each of their ``IntSlider``s one step and back from
the kernel; an observer on the panel's image notes when each new figure arrives. It prints the
medians of both times, and the figures a move drew. ``--baseline REV`` moves the same sliders
in a second kernel on ``src/`` as of REV, alternately, so both see the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lab_kernel import ROOT, Kernel, close, lab_folder, source_at  # noqa: E402

# Runs in the kernel, after the lab.
KERNEL_CODE = r'''
def _sweep_setup():
    import time, ipywidgets
    from ipywidgets.widgets import widget as _w
    live = list((getattr(_w, "_instances", None) or ipywidgets.Widget.widgets).values())
    boxes = [b for b in live if isinstance(b, ipywidgets.Box)]
    sweeps = [b for b in boxes if isinstance(b, ipywidgets.VBox) and len(b.children) == 2
              and isinstance(b.children[0], ipywidgets.HBox)
              and any(isinstance(c, ipywidgets.IntProgress) for c in b.children[0].children)]
    sliders = []
    for n, outer in enumerate(sweeps):
        inner = outer.children[1]
        image, shown = inner.children[-1], []
        image.observe(lambda change, shown=shown: shown.append(time.perf_counter()),
                      names="value")
        for s in inner.children[0].children:
            if isinstance(s, ipywidgets.IntSlider):
                sliders.append((f"sweep {n + 1} {s.description}", s, shown))
    def move(i, k):
        name, s, shown = sliders[i]
        if k % 2 == 0:  # forth (down where up would leave the range), then back
            s._sweep_from = s.value
            target = s.value + s.step if s.value + s.step <= s.max else s.value - s.step
        else:
            target = s._sweep_from
        shown.clear()
        start = time.perf_counter()
        s.value = target
        end = time.perf_counter()
        first = shown[0] if shown else end
        return 1e3 * (first - start), 1e3 * (end - start), len(shown)
    return [name for name, _, _ in sliders], move
_sweep_names, _sweep_move = _sweep_setup()
print("SWEEP" + __import__("json").dumps(_sweep_names))
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lab")
    parser.add_argument("--moves", type=int, default=4)
    parser.add_argument("--baseline", help="a git revision to compare with, move by move")
    args = parser.parse_args()
    base_src = source_at(args.baseline) if args.baseline else None
    # Nothing run ahead: a move back would show the kept sweep, not time a run.
    kernels = [Kernel(lab_folder(args.lab), pythonpath=f"{ROOT}/src", ahead=False)]
    if base_src:
        kernels.append(Kernel(lab_folder(args.lab), pythonpath=base_src))
    print(f"{'slider':<32} {'first ms':>8} {'end ms':>7} {'figures':>7}"
          + (f"  {'base first':>10} {'base end':>8} {'figures':>7}" if base_src else ""))
    try:
        names = []
        for kernel in kernels:
            kernel.run_lab(args.lab)
            out = kernel.run(KERNEL_CODE)
            names.append(json.loads(out[out.index("SWEEP") + 5:].splitlines()[0]))
        for name in names[0]:
            moves = [[] for _ in kernels]
            for k in range(args.moves):
                for which, kernel in enumerate(kernels):
                    j = names[which].index(name)
                    out = kernel.run(f"print(__import__('json').dumps(_sweep_move({j}, {k})))")
                    moves[which].append(json.loads(out))
            line = f"{name:<32}"
            for which, taken in enumerate(moves):
                first, end = (statistics.median(m[n] for m in taken) for n in (0, 1))
                figures = statistics.median(m[2] for m in taken)
                line += (f" {first:8.0f} {end:7.0f} {figures:7.0f}" if which == 0 else
                         f"  {first:10.0f} {end:8.0f} {figures:7.0f}")
            print(line, flush=True)
    finally:
        close(kernels)
        if base_src:
            shutil.rmtree(os.path.dirname(base_src), ignore_errors=True)


if __name__ == "__main__":
    main()
