"""Figures for the chapter "Memory": result in, matplotlib figure out."""

from __future__ import annotations

import numpy as np

from ddplab.chapters.memory.accounting import CATEGORIES
from ddplab.screen.style import LEGEND_SIZE, PAGE_WIDTH, figure

CATEGORY_COLORS = {"parameters": "#4c72b0", "gradients": "#dd8452", "buckets": "#c44e52",
                   "optimizer_state": "#55a868"}
MEASURED = dict(marker="D", color="black", linestyle="none", markersize=6)
ALLOCATOR_LABEL = {"malloc": "malloc's count", "cuda": "CUDA allocator's count"}
MB = 1e6


def _stack(ax, x, held_list, width=0.6):
    bottom = np.zeros(len(held_list))
    for category in CATEGORIES:
        heights = np.array([held[category] for held in held_list]) / MB
        ax.bar(x, heights, width, bottom=bottom, color=CATEGORY_COLORS[category],
               label=category.replace("_", " "))
        bottom += heights
    return bottom


def top_of(results) -> float:
    """The largest bytes any rank of these runs holds, by either count: one y-axis for a
    panel's pictures, so that their heights compare."""
    return max(max(r.total_per_rank + [m for m in r.measured_bytes_per_rank if m is not None])
               for r in results)


def per_rank(result, top=None):
    """One bar per rank, stacked by category, with the allocator's count of the same run; ``top``
    (bytes) fixes the y-axis, as a panel of several runs needs."""
    fig, ax = figure(size=(PAGE_WIDTH, 3.0))
    ranks = np.arange(result.world_size)
    _stack(ax, ranks, result.bytes_per_rank)
    if result.measured_bytes_per_rank[0] is not None:
        ax.plot(ranks, np.array(result.measured_bytes_per_rank) / MB, **MEASURED,
                label=ALLOCATOR_LABEL[result.allocator])
    ax.set_xticks(ranks, [f"rank {r}" for r in ranks])
    ax.set_ylabel("MB held after the step")
    if top is not None:
        ax.set_ylim(0, 1.1 * top / MB)
    view = ", bucket view" if result.bucket_view else ""
    ax.set_title(f"{result.strategy}{view}, {result.optimizer}, "
                 f"{result.parameter_count / 1e6:.1f} M parameters", fontsize=10)
    ax.legend(fontsize=LEGEND_SIZE, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def strategies(results, labels):
    """Rank 0's bytes for each run, side by side, stacked by category."""
    fig, ax = figure(size=(PAGE_WIDTH, 3.2))
    x = np.arange(len(results))
    _stack(ax, x, [r.bytes_per_rank[0] for r in results])
    measured = [r.measured_bytes_per_rank[0] for r in results]
    allocators = {r.allocator for r in results}
    if None not in measured and len(allocators) == 1:  # one allocator's count, or none
        ax.plot(x, np.array(measured) / MB, **MEASURED, label=ALLOCATOR_LABEL[allocators.pop()])
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("MB on rank 0")
    ax.legend(fontsize=LEGEND_SIZE, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def world_sizes(sweep):
    """Rank 0's total bytes against the world size, one line per strategy.
    ``sweep``: ``{label: {world_size: result}}``."""
    fig, ax = figure(size=(PAGE_WIDTH, 3.0))
    for label, runs in sweep.items():
        sizes = sorted(runs)
        ax.plot(sizes, [runs[n].total_per_rank[0] / MB for n in sizes], marker="o",
                label=label)
    ax.set_xlabel("world size")
    ax.set_xticks(sorted({n for runs in sweep.values() for n in runs}))
    ax.set_ylabel("MB per rank")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=LEGEND_SIZE, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


