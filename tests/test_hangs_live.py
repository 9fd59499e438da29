"""The hangs lab's logged-loss panel: a slider move updates the kept figure in place, and that
draws what a new figure of the same result draws under the same layout."""

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

from ddplab.chapters.hangs import logged_loss, plots  # noqa: E402
from ddplab.screen.live_figure import LiveFigure  # noqa: E402


def test_a_logged_loss_update_is_pixel_for_pixel_a_new_figure():
    live = LiveFigure(plots.logged_loss)
    first = np.asarray(Image.open(io.BytesIO(live.png(logged_loss.run(world_size=2, steps=10)))))
    kept = live.figure
    # the batch size changes every loss, the steps the x axis
    for result in (logged_loss.run(world_size=2, batch_size=7, steps=10),
                   logged_loss.run(world_size=2, batch_size=2, steps=25)):
        updated = np.asarray(Image.open(io.BytesIO(live.png(result))))
        assert live.figure is kept  # updated in place, not drawn anew
        fresh = plots.logged_loss(result)
        fresh.set_layout_engine("none")
        fresh.axes[0].set_position(kept.axes[0].get_position())
        fresh.canvas.draw()
        assert np.array_equal(updated, np.asarray(fresh.canvas.buffer_rgba()))
        assert not np.array_equal(first, updated)  # the comparison can fail
        plt.close(fresh)


def test_another_world_size_is_drawn_in_a_new_figure():
    figure = plots.logged_loss(logged_loss.run(world_size=2, steps=5))
    assert not plots.logged_loss.update(figure, logged_loss.run(world_size=3, steps=5))
    plt.close("all")
