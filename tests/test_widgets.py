"""Slider panels: computed at the defaults without a click, re-run on change, errors shown."""

import struct

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import ddplab  # noqa: E402
from ddplab.chapters.averaging import (
    averaging,  # noqa: E402
    plots,  # noqa: E402
)
from ddplab.screen import prediction, widgets  # noqa: E402


def test_a_panel_runs_real_ddp_at_the_defaults_and_again_on_every_change():
    runs = []

    def run(world_size=3, reduction="mean"):
        result = averaging.run(world_size=world_size, reduction=reduction)
        runs.append(result)
        return result

    panel = widgets.explore(run, plots.gradients, world_size=(1, 8), reduction=["mean", "sum"])
    controls, status, _ = panel.children
    slider, dropdown = controls.children
    assert (slider.value, slider.min, slider.max, dropdown.value) == (3, 1, 8, "mean")
    assert len(runs) == 1 and runs[0].world_size == 3  # no click needed
    slider.value = 5
    dropdown.value = "sum"
    assert [(r.world_size, r.reduction) for r in runs] == [(3, "mean"), (5, "mean"), (5, "sum")]
    assert "real DDP run and drawn in" in status.value
    assert status.value.endswith(f"), {ddplab.placement()}")  # where the panel's runs go


def test_the_figure_is_one_image_whose_png_is_replaced_on_a_change():
    panel = widgets.explore(averaging.run, plots.gradients, world_size=(1, 8))
    (slider,), _, image = (panel.children[0].children, *panel.children[1:])
    first = bytes(image.value)  # ipywidgets keeps the bytes as a memoryview
    assert first.startswith(b"\x89PNG\r\n\x1a\n") and image.format == "png"
    width, height = struct.unpack(">II", first[16:24])  # the IHDR chunk
    assert (width, height) == (900, 340)  # gradients' 9 x 3.4 in at 100 dpi, not trimmed
    slider.value = 5
    assert bytes(image.value) != first and bytes(image.value).startswith(b"\x89PNG")


def test_an_error_in_a_run_is_shown_in_the_panel_and_the_next_change_works():
    panel = widgets.explore(averaging.run, plots.gradients, world_size=(1, 4),
                            batch_size=(0, 8))
    controls, status, _ = panel.children
    world_size, batch_size = controls.children
    batch_size.value = 0
    assert "ValueError" in status.value and "batch_size" in status.value
    batch_size.value = 2
    assert "real DDP run" in status.value


def test_a_control_that_is_not_understood_is_a_clear_error():
    with pytest.raises(ValueError, match="control 'world_size'"):
        widgets.explore(averaging.run, plots.gradients, world_size="four")


def test_a_dropdown_of_labelled_values_starts_at_the_default_value():
    seen = []

    def run(cap=None, world_size=2):
        seen.append(cap)
        return averaging.run(world_size=world_size)

    panel = widgets.explore(run, plots.gradients, cap=[("default", None), ("one MB", 1.0)])
    dropdown = panel.children[0].children[0]
    assert dropdown.value is None and dropdown.label == "default"
    dropdown.value = 1.0
    assert seen == [None, 1.0]


def test_a_fixed_value_reaches_every_run_and_shows_no_control():
    seen = []

    def run(world_size=2, naive=True):
        seen.append(naive)
        return averaging.run(world_size=world_size, naive=naive)

    panel = widgets.explore(run, plots.gradients, world_size=(1, 4), naive=widgets.fixed(False))
    (slider,) = panel.children[0].children
    slider.value = 3
    assert seen == [False, False]


def test_a_sweep_restarts_its_bar_at_once_and_fills_its_figure_in_run_by_run():
    from ddplab.common import progress as progress_module

    def sweep(world_sizes=2, progress=None):
        results = []
        for world_size in range(1, world_sizes + 1):
            results.append(averaging.run(world_size=world_size))
            progress_module.report(progress, world_size, world_sizes, f"world size {world_size}",
                                   partial=results[-1])
        return results[-1]

    panel = widgets.explore_sweep(sweep, plots.gradients, world_sizes=(1, 4))
    (bar, _), inner = panel.children[0].children, panel.children[1]
    slider, image = inner.children[0].children[0], inner.children[2]
    bars, figures = [], []
    bar.observe(lambda change: bars.append(change["new"]), names="value")
    image.observe(lambda change: figures.append(bytes(change["new"])), names="value")
    slider.value = 3
    assert bars[0] == 0 and bars[-1] == 3  # restarted before the first run, then each run
    assert len(figures) >= 3  # world sizes 1, 2, 3 drawn as they came (the last one twice)
    assert len(set(figures)) == 3


def test_a_long_run_ticks_in_the_status_line_while_it_runs():
    import time

    def slow(world_size=2):
        time.sleep(0.8)
        return averaging.run(world_size=world_size)

    panel = widgets.explore(slow, plots.gradients, world_size=(1, 4))
    slider, status = panel.children[0].children[0], panel.children[1]
    seen = []
    status.observe(lambda change: seen.append(change["new"]), names="value")
    slider.value = 3
    ticks = [text for text in seen if "running... " in text and " s</i>" in text]
    assert len(ticks) >= 2, seen
    assert "real DDP run and drawn in" in status.value  # the tick stopped before the end


def test_a_hang_shows_where_each_rank_waits_and_counts_down_to_the_timeout():
    from ddplab.chapters.hangs import uneven

    panel = widgets.explore(uneven.run, lambda result: plots.plt.figure(), world_size=(2, 3),
                            timeout=[3.0])
    slider, status = panel.children[0].children[0], panel.children[1]
    seen = []
    status.observe(lambda change: seen.append(change["new"]), names="value")
    slider.value = 3  # rank 2 has a third batch: its backward waits for ranks that left
    ticks = [text for text in seen if "timeout in" in text]
    assert ticks, seen
    # Rank 2 finished steps 0 and 1 like the others; its third backward never returns.
    assert any("rank 2: waits in the backward of step 2: DDP's gradient all-reduce" in text
               for text in ticks), ticks
    assert any("rank 0: waits in the check-in (monitored_barrier" in text
               for text in ticks), ticks
    assert not any("rank 0: waits in the backward of step 2" in text for text in ticks)
    left = [float(text.split("timeout in ")[1].split(" s")[0]) for text in ticks]
    assert left == sorted(left, reverse=True) and left[0] > left[-1]  # it counts down
    assert "hung" in status.value or "real DDP run" in status.value  # the end is drawn


def test_a_prediction_is_compared_with_the_run():
    guess = prediction.ask("How many?", default=2)
    assert prediction.reveal(guess, 3, "rank 3 sees") == \
        "rank 3 sees: 3. You predicted 2: not this time."
    guess.box.value = 3
    assert prediction.reveal(guess, 3.0, "rank 3 sees").endswith("3: right.")
