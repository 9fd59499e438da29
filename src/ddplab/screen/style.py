"""One look for every figure: rank colours and the widths that fit the book's text column."""

from __future__ import annotations

import functools

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import font_manager
from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.text import Text
from PIL import Image, ImageDraw, ImageFont

from ddplab.common.results import placement_text

RANK_COLORS = plt.get_cmap("tab10").colors + plt.get_cmap("Dark2").colors
PAGE_WIDTH = 7.5  # inches: the book's text column at the theme's width, labels stay readable
WIDE = 9.0  # inches: a figure that may overflow into the margin (the page scales it down)
# Points for every legend (legends at 7-8 were hard to read at 1280 px).
LEGEND_SIZE = 10
# What a reader sees: a page saves a figure at 100 pixels an inch (matplotlib's figure.dpi,
# which the inline backend keeps) and, at 1280 px, shows it whole up to FIGURE_PX pixels wide
# (_static/ddplab.css; scripts/check_book_in_browser.py checks it), scaled down beyond. Text
# must be MIN_TEXT_PX there: ``min_text_points`` is the smallest size in points that makes it
# for a figure so wide (tests/test_figure_text.py holds every plot to it).
PIXELS_PER_INCH, FIGURE_PX, MIN_TEXT_PX = 100, 780, 10


def min_text_points(width_inches: float) -> float:
    """The smallest font size, in points, that shows as MIN_TEXT_PX pixels at 1280 px in a
    figure ``width_inches`` wide."""
    scale = min(1.0, FIGURE_PX / (width_inches * PIXELS_PER_INCH))
    return MIN_TEXT_PX * 72 / (PIXELS_PER_INCH * scale)


def rank_color(rank: int):
    """The colour of a rank, the same in every chapter."""
    return RANK_COLORS[rank % len(RANK_COLORS)]


def figure(ax=None, size=(PAGE_WIDTH, 3.0)):
    """``(fig, ax)``: the given axes' figure, or a new figure of this size."""
    if ax is not None:
        return ax.figure, ax
    fig, ax = plt.subplots(figsize=size, constrained_layout=True)
    return fig, ax


def placement_note(fig, result, world_size: int | None = None) -> None:
    """Where ``result``'s ranks ran ("gloo on cpu, 4 ranks") in the figure's lower right corner,
    small and grey, so a figure from a GPU machine says so; nothing where it is not recorded."""
    note = placement_text(result, world_size)
    if note:
        fig.text(0.998, 0.004, note, ha="right", va="bottom", fontsize=8.5, color="0.45")


def log2_x(ax, ticks) -> None:
    """A log2 x axis with plain tick labels at ``ticks`` (GPU and node counts)."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()


TEXT_SIZE = 7.5  # points: a text panel's monospace lines
LINE_SPACING = 1.2  # line height over font size, matplotlib's Text default (``linespacing``)


def y_data_limits(ax, *arrays, zero: bool = False) -> None:
    """Set ``ax``'s y data limits to what ``ax.relim()`` would find for a figure drawing
    ``arrays`` (and 0, where bars or a zero line start there), from the arrays themselves:
    ``relim`` walks every artist, a quarter of a slider's in-place update
    (``screen.live_figure``). The caller then calls ``ax.autoscale_view``."""
    drawn = np.concatenate([np.ravel(a) for a in arrays])
    low, high = float(drawn.min()), float(drawn.max())
    ax.dataLim.intervaly = (min(0.0, low), max(0.0, high)) if zero else (low, high)


def text(result):
    """A result with no figure of its own: its ``describe()`` as a figure (for lab panels).
    ``text.update`` puts another result's lines into it where they are as many."""
    lines = result.describe().splitlines()
    fig = plt.figure(figsize=(PAGE_WIDTH, 0.22 * len(lines) + 0.3))
    fig.add_artist(MonospaceLines(lines, 0.01, 0.98, TEXT_SIZE))
    return fig


def _update_text(fig, result) -> bool:
    """Another result's lines into ``text``'s figure; False where their count (the figure's
    height) differs."""
    lines = result.describe().splitlines()
    block = next(a for a in fig.artists if isinstance(a, MonospaceLines))
    if len(lines) != len(block.lines):
        return False
    block.lines = lines
    block.stale = True
    return True


text.update = _update_text


@functools.lru_cache(maxsize=8)
def _font(pixels: int) -> ImageFont.FreeTypeFont:
    path = font_manager.findfont(font_manager.FontProperties(family="monospace"))
    # BASIC: no shaping library (raqm) per line; describe()'s lines need none (no ligatures,
    # no right-to-left text), and raqm's layout failed on a multi-line string here.
    return ImageFont.truetype(path, size=pixels, layout_engine=ImageFont.Layout.BASIC)


class MonospaceLines(Artist):
    """Lines of monospace text, their top left corner at ``(x, y)`` in figure coordinates.

    On a raster canvas the block is drawn as one image, set by PIL from the font matplotlib
    picks for ``family="monospace"`` (DejaVu Sans Mono): matplotlib 3.11's Agg renderer lays
    out each line and renders each glyph by a Python call of its own
    (``RendererAgg._draw_text_glyphs_and_boxes``), which made a text panel's draw most of a
    slider move (``benchmarks/all_sliders.py --profile``; benchmarks/RESULTS.md, "Text panels
    and tiny references").
    Other canvases (SVG, PDF) get one matplotlib ``Text``, so the text stays text there.
    """

    def __init__(self, lines, x: float, y: float, size: float):
        super().__init__()
        self.lines, self.xy, self.size = list(lines), (x, y), size

    def as_text(self) -> Text:
        """The same lines as one matplotlib ``Text``, in the same place."""
        figure = self.get_figure()  # the figure it was added to (matplotlib < 3.10 has no root=)
        return Text(*self.xy, "\n".join(self.lines), va="top", family="monospace",
                    fontsize=self.size, transform=figure.transFigure, figure=figure)

    def get_window_extent(self, renderer=None):
        """The ``Text``'s box, for ``bbox_inches="tight"`` (a notebook's inline figures)."""
        return self.as_text().get_window_extent(renderer)

    def draw(self, renderer) -> None:
        if not self.get_visible():
            return
        if not isinstance(renderer, RendererAgg):
            self.as_text().draw(renderer)
            return
        figure = self.get_figure()
        font = _font(round(renderer.points_to_pixels(self.size)))
        step = LINE_SPACING * renderer.points_to_pixels(self.size)
        left, top = figure.transFigure.transform(self.xy)  # pixels, y up
        width = max(1, int(figure.bbox.width - left))
        height = max(1, int(round(step * len(self.lines) + font.getmetrics()[1])))
        mask = Image.new("L", (width, height))
        draw = ImageDraw.Draw(mask)
        for i, line in enumerate(self.lines):  # "la": x at the left, y at the ascender
            draw.text((0, round(i * step)), line, font=font, fill=255, anchor="la")
        rgba = np.zeros((height, width, 4), np.uint8)  # black, the mask as alpha
        rgba[..., 3] = np.asarray(mask)
        gc = renderer.new_gc()
        renderer.draw_image(gc, round(left), round(top) - height, rgba[::-1])
        gc.restore()
        self.stale = False
