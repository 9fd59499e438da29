"""One look for every figure: rank colours and the widths that fit the book's text column."""

from __future__ import annotations

import matplotlib.pyplot as plt

from ddplab.common.results import placement_text

RANK_COLORS = plt.get_cmap("tab10").colors + plt.get_cmap("Dark2").colors
PAGE_WIDTH = 7.5  # inches: the book's text column at the theme's width, labels stay readable
WIDE = 9.0  # inches: a figure that may overflow into the margin (the page scales it down)
# Points for every legend: a page shows a figure of PAGE_WIDTH at about 72 pixels an inch, so
# this is about 10 pixels there (legends at 7-8 were hard to read at 1280 px, issue 32).
LEGEND_SIZE = 10


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
        fig.text(0.998, 0.004, note, ha="right", va="bottom", fontsize=6.5, color="0.45")


def log2_x(ax, ticks) -> None:
    """A log2 x axis with plain tick labels at ``ticks`` (GPU and node counts)."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()


def text(result):
    """A result with no figure of its own: its ``describe()`` as a figure (for lab panels)."""
    lines = result.describe().splitlines()
    fig = plt.figure(figsize=(PAGE_WIDTH, 0.22 * len(lines) + 0.3))
    fig.text(0.01, 0.98, "\n".join(lines), va="top", family="monospace", fontsize=7.5)
    return fig
