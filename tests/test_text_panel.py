"""The text panel (``screen.style.text``): a result's ``describe()`` lines, set in one image
where matplotlib's own text would stand, and updated in place by a slider move."""

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

from ddplab.screen import style  # noqa: E402
from ddplab.screen.live_figure import LiveFigure  # noqa: E402


class Described:
    def __init__(self, *lines):
        self.lines = lines

    def describe(self):
        return "\n".join(self.lines)


FIRST = Described("4 ranks x 4 samples, 3 steps", "  step  rank 0    rank 1",
                  "     0  1.234567  0.987654")
NEXT = Described("5 ranks x 2 samples, 3 steps", "  step  rank 0    rank 1",
                 "     0  2.000001  0.100000")


def drawn(figure) -> np.ndarray:
    figure.canvas.draw()
    return np.asarray(figure.canvas.buffer_rgba()).copy()


def ink(pixels: np.ndarray):
    """The box (rows, columns) of the pixels darker than the white ground."""
    rows, columns = np.nonzero(pixels[..., :3].min(axis=2) < 128)
    return rows.min(), rows.max(), columns.min(), columns.max()


def test_the_lines_stand_where_matplotlib_sets_them():
    """The same lines in one matplotlib Text of the same font and size: the ink covers the
    same box within 8 pixels, about a character (matplotlib 3.11 sets these lines within 2;
    3.10, Colab's, a few pixels wider and its lines closer: the ink's right edge at 181 px
    against 174, its last row at 32 against 36), and the picture is not blank."""
    ours = drawn(style.text(FIRST))
    theirs = plt.figure(figsize=ours.shape[1::-1] / np.array(plt.rcParams["figure.dpi"]))
    theirs.text(0.01, 0.98, FIRST.describe(), va="top", family="monospace",
                fontsize=style.TEXT_SIZE)
    expected = drawn(theirs)
    assert ours.shape == expected.shape
    np.testing.assert_allclose(ink(ours), ink(expected), atol=8)
    top, bottom, left, right = ink(ours)
    assert bottom - top > 2 * style.TEXT_SIZE and right - left > 100  # three lines, not one
    plt.close("all")


def test_an_update_draws_what_a_new_figure_of_that_result_draws():
    live = LiveFigure(style.text)
    first = np.asarray(Image.open(io.BytesIO(live.png(FIRST))))
    kept = live.figure
    updated = np.asarray(Image.open(io.BytesIO(live.png(NEXT))))
    assert live.figure is kept  # in place
    assert np.array_equal(updated, drawn(style.text(NEXT)))
    assert not np.array_equal(first, updated)  # the comparison can fail
    plt.close("all")


def test_another_number_of_lines_needs_a_new_figure():
    figure = style.text(FIRST)
    assert not style.text.update(figure, Described("one line"))
    assert style.text.update(figure, NEXT)
    plt.close("all")


def test_a_vector_canvas_keeps_the_text_as_text():
    svg = io.BytesIO()
    style.text(FIRST).savefig(svg, format="svg")
    assert b"<image" not in svg.getvalue()  # glyphs as paths, not a picture of them
    plt.close("all")


def test_a_tight_crop_keeps_the_lines():
    """A notebook shows a figure saved with ``bbox_inches="tight"``: the crop is the text's."""
    png = io.BytesIO()
    style.text(FIRST).savefig(png, format="png", bbox_inches="tight")
    pixels = np.asarray(Image.open(png))
    top, bottom, left, right = ink(pixels)
    assert bottom - top > 2 * style.TEXT_SIZE and right - left > 100
    assert pixels.shape[1] < 0.8 * style.PAGE_WIDTH * plt.rcParams["figure.dpi"]  # cropped
    plt.close("all")
