"""A slider panel's kept figure: an update in place draws what a new figure would."""

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from ddplab.chapters.averaging import (
    averaging,  # noqa: E402
    plots,  # noqa: E402
)
from ddplab.screen import live_figure  # noqa: E402
from ddplab.screen.live_figure import LiveFigure  # noqa: E402


@pytest.fixture(scope="module")
def results():
    return {"first": averaging.run(world_size=4, batch_size=8, naive=False),
            "next": averaging.run(world_size=4, batch_size=3, reduction="sum", naive=False),
            "fewer ranks": averaging.run(world_size=2, batch_size=8, naive=False)}


@pytest.fixture(scope="module")
def moves():
    """A slider's moves at world size 4: the data, ticks and title change with each."""
    return [averaging.run(world_size=4, batch_size=b, reduction=r, naive=False)
            for b, r in [(1, "mean"), (32, "sum"), (2, "sum"), (16, "mean"), (5, "sum")]]


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)))


def test_an_update_in_place_sets_what_a_new_figure_of_that_result_draws(results):
    kept = plots.gradients(results["first"])
    assert plots.update_gradients(kept, results["next"])
    fresh = plots.gradients(results["next"])
    (a, b) = kept.axes[0], fresh.axes[0]
    assert a.get_title() == b.get_title() and "sum loss" in a.get_title()
    np.testing.assert_allclose(a.get_ylim(), b.get_ylim())
    lines = [{line.get_gid(): line.get_ydata() for line in ax.lines if line.get_gid()}
             for ax in (a, b)]
    assert lines[0].keys() == lines[1].keys() == {"rank 0", "rank 1", "rank 2", "rank 3",
                                                  "reference"}
    for gid in lines[0]:
        np.testing.assert_array_equal(lines[0][gid], lines[1][gid])
    heights = [[p.get_height() for p in ax.patches if p.get_gid() == "ddp"] for ax in (a, b)]
    np.testing.assert_array_equal(*heights)
    plt.close("all")


def test_an_updated_png_is_pixel_for_pixel_a_new_figure_under_the_same_layout(results, moves):
    live = LiveFigure(plots.gradients)
    first = pixels(live.png(results["first"]))
    kept = live.figure
    for result in moves:
        updated = pixels(live.png(result))  # legend's inside pasted back, not laid out
        assert live.figure is kept  # updated in place, not drawn anew
        fresh = plots.gradients(result)
        fresh.set_layout_engine("none")
        fresh.axes[0].set_position(kept.axes[0].get_position())
        fresh.canvas.draw()
        expected = np.asarray(fresh.canvas.buffer_rgba())
        assert updated.shape == expected.shape == (340, 900, 4)
        assert np.array_equal(updated, expected), result.describe()
        assert not np.array_equal(first, updated)  # the comparison can fail
        plt.close(fresh)


def test_a_result_with_other_ranks_is_drawn_in_a_new_figure(results):
    live = LiveFigure(plots.gradients)
    live.png(results["first"])
    kept = live.figure
    assert not plots.update_gradients(kept, results["fewer ranks"])
    png = live.png(results["fewer ranks"])
    assert live.figure is not kept and pixels(png).shape == (340, 900, 4)
    assert "world size 2" in live.figure.axes[0].get_title()


def test_no_figure_is_left_open_in_pyplot_for_a_notebook_to_show_again(results):
    plt.close("all")
    live = LiveFigure(plots.gradients)
    live.png(results["first"])
    live.png(results["next"])
    assert plt.get_fignums() == []


def labelled(result):
    fig, ax = plt.subplots(figsize=(4, 3), constrained_layout=True)
    ax.plot([0, 1], [0, result])
    ax.set_ylabel("y")
    return fig


def relabel(fig, result) -> bool:
    fig.axes[0].lines[0].set_ydata([0, result])
    fig.axes[0].set_ylabel("a label far longer\nthan the first one\non three lines")
    return True


labelled.update = relabel


def test_a_label_that_no_longer_fits_is_laid_out_again():
    live = LiveFigure(labelled)
    live.png(1.0)
    left = live.figure.axes[0].get_position().x0
    live.png(2.0)
    assert live.figure.axes[0].get_position().x0 > left  # moved right to make room
    assert live_figure._fits(live.figure)
    plt.close("all")


def test_a_plot_without_update_is_drawn_anew_every_time(results):
    def draw(result):
        return plots.gradients(result)

    live = LiveFigure(draw)
    png = live.png(results["first"])
    assert live.figure is None and pixels(png).shape == (340, 900, 4)
    fresh = plots.gradients(results["first"])  # laid out by its engine, with the slack
    fresh.get_layout_engine().set(w_pad=live_figure.SLACK, h_pad=live_figure.SLACK)
    fresh.canvas.draw()
    assert np.array_equal(pixels(png), np.asarray(fresh.canvas.buffer_rgba()))
    plt.close(fresh)


def test_a_new_figure_of_the_same_frame_takes_the_last_layout_pixel_for_pixel(results):
    def draw(result):
        return plots.gradients(result)

    live = LiveFigure(draw)
    first = live.png(results["first"])
    assert live.frame is not None
    assert np.array_equal(pixels(live.png(results["first"])), pixels(first))
    # another result: the kept layout, not the engine's, where everything fits
    png = pixels(live.png(results["next"]))
    fresh = plots.gradients(results["next"])
    fresh.set_layout_engine("none")
    live_figure._set_layout(fresh, live.frame[1])
    fresh.canvas.draw()
    assert np.array_equal(png, np.asarray(fresh.canvas.buffer_rgba()))
    assert not np.array_equal(png, pixels(first))  # the comparison can fail
    plt.close(fresh)


def test_a_new_figure_that_overflows_the_last_layout_is_laid_out_again():
    def draw(label):
        fig, ax = plt.subplots(figsize=(4, 3), constrained_layout=True)
        ax.plot([0, 1], [0, 1])
        ax.set_ylabel(label)
        return fig

    live = LiveFigure(draw)
    live.png("y")
    left = live.frame[1][0][0].x0
    live.png("a label far longer\nthan the first one\non three lines")
    assert live.frame[1][0][0].x0 > left  # laid out again, with room for the label
    assert plt.get_fignums() == []


def test_figures_of_another_size_do_not_share_a_layout():
    def draw(height):
        return plt.subplots(figsize=(4, height), constrained_layout=True)[0]

    assert live_figure._frame(draw(3)) != live_figure._frame(draw(4))
    plt.close("all")


@pytest.mark.parametrize("options, kept", [
    ({"loc": "upper right", "framealpha": 1}, True),
    ({"loc": "best", "framealpha": 1}, False),  # follows the data
    ({"loc": "upper right", "framealpha": 0.5}, False),  # the data shows through
])
def test_only_a_legend_that_stays_and_hides_what_is_under_it_is_pasted(options, kept):
    fig, ax = plt.subplots()
    ax.plot([0, 1], label="a")
    assert live_figure._stays_and_hides(ax.legend(**options)) is kept
    plt.close(fig)


def legend_over(color: str, dpi: int, linewidth: float, pad: float):
    """The pixels of a one-entry legend drawn over an axes of ``color``, and what
    ``_insides`` would paste of it, as (row, column) slices of the image."""
    fig, ax = plt.subplots(figsize=(6, 3), dpi=dpi)
    ax.set_facecolor(color)
    ax.plot([0, 1], [0, 1], label="a")
    legend = ax.legend(loc="upper right", framealpha=1, borderaxespad=pad)
    legend.get_frame().set_linewidth(linewidth)
    fig.canvas.draw()
    image = np.asarray(fig.canvas.buffer_rgba()).copy()
    height = image.shape[0]
    # copy_from_bbox's rows: display y up, the image's rows down; edges cut to whole pixels
    boxes = [(slice(height - int(box.y1), height - int(box.y0)), slice(int(box.x0), int(box.x1)))
             for box in live_figure._insides(legend, fig.canvas.get_renderer())]
    plt.close(fig)
    return image, boxes


@pytest.mark.parametrize("dpi, linewidth, thin", [
    (100, 1.0, False),  # the panels' figures: a 1.4-pixel frame
    (72, 0.8, True),  # frames thinner than a pixel: their edge rows show the data faintly
    (60, 1.0, True),
])
def test_what_a_legend_pastes_is_drawn_the_same_over_any_data_and_no_less(dpi, linewidth, thin):
    """Over a black and a yellow axes, the pasted pixels are equal. Agg snaps the frame to the
    pixel grid, up to a pixel inside the legend's extent: pasting from the extent took an edge
    row that showed the data (matplotlib 3.10 and 3.11 alike). Under a frame thinner than a
    pixel, the row or column just outside the pasted boxes shows the data: they take all they
    may. (Under a thicker one, that row is the frame's, drawn anew on every update.)"""
    for pad in np.linspace(0.3, 0.7, 6):  # the legend's edges at several fractions of a pixel
        (black, boxes), (yellow, _) = (legend_over(c, dpi, linewidth, pad)
                                       for c in ("black", "yellow"))
        shows_data = (black != yellow).any(axis=2)
        (top_to_bottom, inner_columns), (inner_rows, left_to_right) = boxes
        for rows, columns in boxes:
            assert rows.stop - rows.start > 5 and columns.stop - columns.start > 5
            assert not shows_data[rows, columns].any(), (pad, rows, columns)
        next_out = [shows_data[top_to_bottom.start - 1, inner_columns],
                    shows_data[top_to_bottom.stop, inner_columns],
                    shows_data[inner_rows, left_to_right.start - 1],
                    shows_data[inner_rows, left_to_right.stop]]
        if thin:
            assert any(edge.any() for edge in next_out), pad


def test_a_new_figure_for_other_ranks_keeps_the_last_layout_where_it_fits(results):
    live = LiveFigure(plots.gradients)
    live.png(results["first"])
    kept = live.figure.axes[0].get_position().frozen()
    live.png(results["fewer ranks"])  # update says no: a new figure, same frame
    assert "world size 2" in live.figure.axes[0].get_title()
    np.testing.assert_allclose(live.figure.axes[0].get_position().get_points(),
                               kept.get_points())
    assert live_figure._fits(live.figure)
    plt.close("all")


def test_the_cluster_models_figure_updates_in_place_pixel_for_pixel():
    from ddplab.chapters.time_cost import cluster_prediction
    from ddplab.chapters.time_cost import plots as time_cost_plots

    live = LiveFigure(time_cost_plots.cluster)
    first = pixels(live.png(cluster_prediction.run()))
    kept = live.figure
    for change in [{"nodes": 5}, {"gpus_per_node": 3}, {"batch_size": 1}, {"nodes": 1}]:
        result = cluster_prediction.run(**change)
        updated = pixels(live.png(result))
        assert live.figure is kept, change
        fresh = time_cost_plots.cluster(result)
        fresh.set_layout_engine("none")
        live_figure._set_layout(fresh, live_figure._layout(kept))
        fresh.canvas.draw()
        assert np.array_equal(updated, np.asarray(fresh.canvas.buffer_rgba())), change
        assert not np.array_equal(updated, first)
        plt.close(fresh)
    other = list(cluster_prediction.cost_model.INTER_NODE)[-1]
    assert not time_cost_plots.update_cluster(kept, cluster_prediction.run(inter=other))


def test_a_figure_of_subfigures_takes_the_last_layout_pixel_for_pixel():
    """Lab 1's node figure (two subfigures, the top one's axes turned off): a move draws a new
    figure in the last one's layout (its subfigures' boxes and their axes), not laid out
    again, and that is what the same figure placed by hand draws."""
    from ddplab.chapters.averaging import per_node

    def draw(result):  # the figure without its update: a new one every move
        return plots.node_layout(result)

    first, second = (per_node.node_average(nodes=n, gpus_per_node=2, batch_size=2)
                     for n in (2, 3))
    live = LiveFigure(draw)
    png = pixels(live.png(first))
    assert live.frame is not None  # subfigures no longer stop a layout from being kept
    boxes = [box.bounds for box in live.frame[1][2]]
    assert len(boxes) == 2 and boxes[0][1] > boxes[1][1]  # top above bottom, as laid out
    moved = pixels(live.png(second))
    fresh = live_figure._own_canvas(plots.node_layout(second))
    fresh.set_layout_engine("none")
    live_figure._set_layout(fresh, live.frame[1])
    fresh.canvas.draw()
    assert np.array_equal(moved, np.asarray(fresh.canvas.buffer_rgba()))
    assert not np.array_equal(moved, png)  # the comparison can fail
    # Placed by hand, not where a plain draw without layout would put them.
    bare = live_figure._own_canvas(plots.node_layout(second))
    bare.set_layout_engine("none")
    bare.canvas.draw()
    assert not np.array_equal(moved, np.asarray(bare.canvas.buffer_rgba()))


def test_an_axis_turned_off_does_not_count_as_overflowing():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.set_position([0.0, 0.0, 1.0, 1.0])  # its tick labels would lie outside the figure
    fig.canvas.draw()
    assert not live_figure._fits(fig)
    ax.set_axis_off()
    fig.canvas.draw()
    assert live_figure._fits(fig)
    plt.close(fig)


def test_a_frame_seen_before_the_last_takes_its_own_layout():
    """A slider that changes the figure's size, moved there and back: the way back finds the
    first size's layout (laid out once), though a figure of another size came between."""
    def draw(height):
        fig, ax = plt.subplots(figsize=(4, height), constrained_layout=True)
        ax.plot([0, 1], [0, 1])
        ax.set_title(f"height {height}")
        return fig

    live = LiveFigure(draw)
    first = pixels(live.png(3))
    layout = live.frame[1]
    live.png(4)
    assert len(live.layouts) == 2 and live.frame[1] is not layout
    engine = []
    again = draw(3)  # what the panel builds for the way back; its layout engine must not run
    again.get_layout_engine().execute = lambda fig: engine.append(fig)
    live._draw_new(live_figure._own_canvas(again))
    assert engine == [] and live.frame[1] is layout
    assert np.array_equal(np.asarray(again.canvas.buffer_rgba()), first)
    assert plt.get_fignums() == []


def test_lab_1s_node_figure_updates_in_place_pixel_for_pixel():
    """Other nodes and GPUs per node (other ranks, nodes and legend entries): the node panel's
    figure takes each into its axes, and draws what a new figure under its layout draws."""
    from ddplab.chapters.averaging import per_node

    live = LiveFigure(plots.node_layout)
    first = pixels(live.png(per_node.node_average(nodes=2, gpus_per_node=2, batch_size=2)))
    kept = live.figure
    for nodes, gpus_per_node in [(3, 2), (2, 1), (1, 3), (2, 2)]:
        result = per_node.node_average(nodes=nodes, gpus_per_node=gpus_per_node, batch_size=2)
        updated = pixels(live.png(result))
        assert live.figure is kept
        fresh = live_figure._own_canvas(plots.node_layout(result))
        fresh.set_layout_engine("none")
        live_figure._set_layout(fresh, live_figure._layout(kept))
        fresh.canvas.draw()
        assert np.array_equal(updated, np.asarray(fresh.canvas.buffer_rgba())), (nodes,
                                                                                  gpus_per_node)
        assert (nodes, gpus_per_node) == (2, 2) or not np.array_equal(updated, first)


def two_panels(label: str):
    """Two subfigures, each an axes with a legend that stays and hides: what the kept layout
    and the pasted legends are for, with no torch in it."""
    fig = plt.figure(figsize=(5, 4), layout="constrained")
    for sub in fig.subfigures(2, 1):
        ax = sub.subplots()
        ax.plot([0, 1], [0, len(label)], label="line")
        ax.set_ylabel(label)
        ax.legend(loc="upper left", framealpha=1)
    return fig


def test_without_the_private_names_every_figure_is_laid_out_by_its_engine(monkeypatch):
    """Where a matplotlib lacks a private name a kept layout is put back with
    (``live_figure.PRIVATE``), nothing is kept, and each figure is what its own engine lays
    out: slower, never wrong."""
    live = LiveFigure(two_panels)
    live.png("y")
    assert live.layouts  # with the names (matplotlib 3.7 to 3.11): a layout is kept
    monkeypatch.setitem(live_figure.PRIVATE, "SubFigure", ("_not_in_this_matplotlib",))
    live = LiveFigure(two_panels)
    for label in ("y", "a longer label", "y"):
        png = pixels(live.png(label))
        fresh = live_figure._own_canvas(two_panels(label))
        fresh.get_layout_engine().set(w_pad=live_figure.SLACK, h_pad=live_figure.SLACK)
        fresh.canvas.draw()
        assert np.array_equal(png, np.asarray(fresh.canvas.buffer_rgba())), label
    assert live.layouts == {} and live.frame is None
    assert live_figure._frame(fresh) is None
    assert not live_figure._set_layout(fresh, ([], [None] * 3, []))  # nothing moved
