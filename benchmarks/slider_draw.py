"""What a slider move costs in the kernel: the run, and the draw before and after live_figure.

    python benchmarks/slider_draw.py [--moves 20]

For the first panel of each lab, two results are made once (two neighbouring slider values)
and then drawn alternately, ``--moves`` times, two ways, in this process:

* baseline: what ``widgets.explore`` did before ``screen.live_figure``: a new figure per move,
  ``savefig`` to PNG (which draws twice under a layout engine), then closed;
* kept: ``LiveFigure.png``: the figure kept and updated in place where the plot has an
  ``update`` (lab 1), else drawn once and encoded from the canvas.

It also times the run of one move (median of 5), so the two parts of a move can be compared.
Medians in ms, and the baseline's draw over the kept one's. Drawing only: the page's time in
JupyterLab and the browser comes on top (``scripts/lab_in_browser.py`` times the whole move).
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from ddplab.chapters.averaging import averaging
from ddplab.chapters.averaging import plots as averaging_plots  # noqa: E402
from ddplab.chapters.buckets import overlap
from ddplab.chapters.buckets import plots as buckets_plots  # noqa: E402
from ddplab.chapters.hangs import batchnorm
from ddplab.chapters.hangs import plots as hangs_plots  # noqa: E402
from ddplab.chapters.sharding import plots as sharding_plots  # noqa: E402
from ddplab.chapters.sharding import sharding
from ddplab.chapters.time_cost import plots as time_cost_plots  # noqa: E402
from ddplab.chapters.time_cost import step_time  # noqa: E402
from ddplab.screen.live_figure import LiveFigure  # noqa: E402

# (lab and slider, run, plot, the slider's two neighbouring values)
PANELS = [
    ("1 averaging, batch size at world size 4", averaging.run, averaging_plots.gradients,
     [{"batch_size": 8, "naive": False}, {"batch_size": 9, "naive": False}]),
    ("2 sharding, batch size", sharding.run, sharding_plots.draws,
     [{"batch_size": 2}, {"batch_size": 3}]),
    ("4 buckets, width", overlap.run, buckets_plots.overview,
     [{"width": 1024}, {"width": 960}]),
    ("5 time cost, batch size", step_time.paired, time_cost_plots.step_phases,
     [{"batch_size": 32}, {"batch_size": 40}]),
    ("6 hangs, BatchNorm world size", batchnorm.run, hangs_plots.batchnorm,
     [{"world_size": 4}, {"world_size": 2}]),
]


def median_ms(fn, repeats: int) -> float:
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        fn(i)
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def savefig_png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=20)
    args = parser.parse_args()
    print(f"{'lab, slider':<42} {'run':>7} {'draw before':>12} {'draw now':>9} {'ratio':>6}")
    for name, run, plot, values in PANELS:
        ran, before, now = measure(run, plot, values, args.moves)
        print(f"{name:<42} {ran:7.1f} {before:12.1f} {now:9.1f} {before / now:5.1f}x")


def measure(run, plot, values, moves: int) -> tuple[float, float, float]:
    """Median ms of a run, of a baseline draw and of a kept figure's draw."""
    results = [run(**v) for v in values]
    ran = median_ms(lambda i: run(**values[i % 2]), 5)
    before = median_ms(lambda i: savefig_png(plot(results[i % 2])), moves)
    live = LiveFigure(plot)
    live.png(results[1])
    return ran, before, median_ms(lambda i: live.png(results[i % 2]), moves)


if __name__ == "__main__":
    main()
