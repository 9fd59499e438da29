"""Static panels: every grid point is a real run, the HTML fetches nothing, and it stays light."""

import base64
import io
import json
import re
from html.parser import HTMLParser

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from ddplab.chapters.averaging import (
    averaging,  # noqa: E402
    plots,  # noqa: E402
)
from ddplab.screen import static_panel  # noqa: E402
from ddplab.screen.style import PAGE_WIDTH  # noqa: E402


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def parse(panel):
    tags = Tags()
    tags.feed(panel.data)
    script = re.search(r"data = (\{.*?\});\n", panel.data).group(1)
    return tags.tags, json.loads(script.replace("<\\/", "</"))


@pytest.fixture(scope="module")
def grid():
    """averaging at world sizes 1 and 2, mean and sum: 4 real runs, recorded."""
    calls = []

    def run(world_size=2, reduction="mean"):
        calls.append((world_size, reduction))
        return averaging.run(world_size=world_size, reduction=reduction)

    panel = static_panel.explore(run, plots.gradients, describe=averaging.Averaging.describe,
                                 world_size=[1, 2], reduction=["mean", "sum"])
    return calls, panel


def test_every_grid_point_is_run_once_in_the_order_the_script_indexes(grid):
    calls, panel = grid
    assert calls == [(1, "mean"), (1, "sum"), (2, "mean"), (2, "sum")]
    _, data = parse(panel)
    assert data["sizes"] == [2, 2]
    assert len(data["texts"]) == len(data["image"]) == 4
    # Row-major, as the script computes it: point = world_size index * 2 + reduction index.
    for i, (world_size, reduction) in enumerate(calls):
        assert data["texts"][i].startswith(f"world size {world_size}, ")
        assert f"loss reduction {reduction!r}" in data["texts"][i]
    # World size 1 draws the same with mean and sum; world size 2 does not: images differ.
    assert len(set(data["image"])) >= 3


def test_the_panel_starts_at_the_run_defaults_and_shows_that_point(grid):
    _, panel = grid
    tags, data = parse(panel)
    slider = next(a for t, a in tags if t == "input")
    select = next(a for t, a in tags if t == "select")
    assert (slider["type"], slider["min"], slider["max"], slider["value"]) == \
        ("range", "0", "1", "1")  # world_size=2, run's default
    assert select["name"] == "reduction"
    selected = [a for t, a in tags if t == "option" and "selected" in a]
    assert [a["value"] for a in selected] == ["0"]  # "mean"
    img = next(a for t, a in tags if t == "img")
    assert img["src"] == data["images"][data["image"][2]]


def test_the_html_fetches_nothing(grid):
    _, panel = grid
    tags, data = parse(panel)
    text = re.sub(r"data:image/[a-z+]+;base64,[A-Za-z0-9+/=]+", "", panel.data)
    assert not re.search(r"https?:|//[a-z]|\burl\(|@import", text)
    assert not any(t in ("link", "iframe") or "src" in a and t == "script" for t, a in tags)
    assert all(uri.startswith(("data:image/png;base64,", "data:image/svg+xml;base64,"))
               for uri in data["images"])


def test_figures_are_page_width_images_and_the_panel_is_within_budget(grid):
    _, panel = grid
    _, data = parse(panel)
    size = len(panel.data.encode())
    print(f"panel of 4 points: {size:,} bytes")
    assert size < static_panel.MAX_PANEL_BYTES
    png = next(u for u in data["images"] if u.startswith("data:image/png"))
    image = Image.open(io.BytesIO(base64.b64decode(png.split(",", 1)[1])))
    assert image.width == round(PAGE_WIDTH * static_panel.PIXELS_PER_INCH)


def test_a_panel_over_budget_is_refused(monkeypatch):
    monkeypatch.setattr(static_panel, "MAX_PANEL_BYTES", 10_000)
    with pytest.raises(ValueError, match="MAX_PANEL_BYTES"):
        static_panel.explore(averaging.run, plots.gradients, world_size=[1])


def test_labelled_values_and_a_default_result_text():
    panel = static_panel.explore(averaging.run, plots.gradients,
                                 world_size=[("one rank", 1), ("two ranks", 2)])
    tags, data = parse(panel)
    assert [a.get("value") for t, a in tags if t == "option"] == ["0", "1"]
    assert data["labels"] == [["one rank", "two ranks"]]
    # Without describe=, the first line of the result's own describe().
    assert data["texts"][0] == averaging.run(world_size=1).describe().splitlines()[0]


def test_bad_controls_are_clear_errors():
    with pytest.raises(ValueError, match="control 'world_size'"):
        static_panel.explore(averaging.run, plots.gradients, world_size=(1, 8))
    with pytest.raises(ValueError, match="at least one control"):
        static_panel.explore(averaging.run, plots.gradients)
