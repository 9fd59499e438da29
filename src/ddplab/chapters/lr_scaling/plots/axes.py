"""What the chapter's figures share: a colour per world size, the expected loss's log axis,
plain tick labels on a log axis."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

WORLD_COLORS = {1: "#1b9e77", 2: "#7570b3", 4: "#d95f02", 8: "#e7298a"}
LOG_FLOOR = 1e-9  # a difference of exactly 0 drawn at the bottom of the log axis
LOSS_LIMITS = (0.2, 4.0)  # the expected loss starts near 2; the noise floor is 0.25


def world_color(world_size: int):
    return WORLD_COLORS.get(world_size, plt.get_cmap("viridis")(min(world_size, 64) / 64))


def plain_ticks(axis, values) -> None:
    """Ticks at ``values`` with plain labels on a log axis (no 6x10^0, no minor labels)."""
    axis.set_major_locator(FixedLocator(sorted(set(float(v) for v in values))))
    axis.set_major_formatter(ScalarFormatter())
    axis.set_minor_locator(NullLocator())


def loss_axes(ax, floor: float | None = None):
    """Log scale from just under the noise floor to twice the start, plain tick labels; a dotted
    line at ``floor``, the result's noise floor."""
    ax.set_yscale("log")
    ax.set_ylim(*LOSS_LIMITS)
    plain_ticks(ax.yaxis, [0.25, 0.5, 1, 2, 4])
    if floor is not None:
        ax.axhline(floor, color="0.5", lw=0.8, ls=":")
