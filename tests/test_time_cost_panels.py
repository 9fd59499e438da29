"""The time-cost lab's panels redraw in place: an update puts a new result into the kept
figure and draws, pixel for pixel, what a new figure of that result draws under the same
layout (the pattern of tests/test_live_figure.py)."""

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from ddplab.chapters.time_cost import compression, plots  # noqa: E402
from ddplab.screen import live_figure  # noqa: E402
from ddplab.screen.live_figure import LiveFigure  # noqa: E402

SMALL = (8, 64, 32, 4)


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)))


def fresh_pixels(plot, result, kept) -> np.ndarray:
    """A new figure of ``result``, laid out as ``kept``, drawn."""
    fresh = plot(result)
    fresh.set_layout_engine("none")
    live_figure._set_layout(fresh, live_figure._layout(kept))
    fresh.canvas.draw()
    out = np.asarray(fresh.canvas.buffer_rgba()).copy()
    plt.close(fresh)
    return out


def assert_updates_in_place(plot, results):
    """Each of ``results`` after the first updates the first's figure, and draws what a new
    figure of it draws; each differs from the one before (the comparison can fail)."""
    live = LiveFigure(plot)
    before = pixels(live.png(results[0]))
    kept = live.figure
    for result in results[1:]:
        updated = pixels(live.png(result))
        assert live.figure is kept  # updated in place, not drawn anew
        assert np.array_equal(updated, fresh_pixels(plot, result, kept))
        assert not np.array_equal(updated, before)
        before = updated


@pytest.fixture(scope="module")
def hooks():
    runs = {hook: compression.run(2, hook, layers=SMALL, batch_size=4)
            for hook in compression.HOOKS}
    runs["powersgd rank 2"] = compression.run(2, "powersgd", layers=SMALL, batch_size=4,
                                              powersgd_rank=2)
    return runs


def test_the_hook_comparison_fills_in_and_updates_in_place(hooks):
    names = compression.HOOKS
    partials = [{h: hooks[h] if i < done else None for i, h in enumerate(names)}
                for done in range(1, len(names) + 1)]
    rank_two = {**partials[-1], "powersgd": hooks["powersgd rank 2"]}
    assert_updates_in_place(plots.compression, [*partials, rank_two])


def test_a_hook_still_to_run_has_its_row_and_no_bar(hooks):
    fig = plots.compression({"none": hooks["none"], "fp16": None})
    for ax in fig.axes:
        assert [bar.get_visible() for bar in ax.patches] == [True, False]
    assert not plots.update_compression(fig, {"none": hooks["none"]})  # other rows: new figure
    plt.close(fig)


def test_the_all_reduce_figure_updates_in_place_across_world_sizes():
    from ddplab.chapters.time_cost import allreduce

    sizes = (4096, 65536, 2 ** 20)
    runs = [allreduce.run(world_size, sizes=sizes, repeats=repeats, copy_bytes=2 ** 22)
            for world_size, repeats in ((2, 3), (3, 3), (2, 5))]
    assert_updates_in_place(plots.allreduce, runs)
    both = plots.allreduce({2: runs[0], 3: runs[1]})  # the page's: two world sizes
    assert not plots.update_allreduce(both, runs[2])
    plt.close(both)
