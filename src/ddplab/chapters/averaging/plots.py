"""Figures for the chapter "Gradient averaging": result in, matplotlib figure out."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import PatchCollection
from matplotlib.patches import Rectangle

from ddplab.screen.style import LEGEND_SIZE, WIDE, figure, rank_color, y_data_limits


def gradients(result, ax=None, legend: bool = True):
    """Every gradient element: each rank's local gradient, DDP's, and the one-process reference."""
    fig, ax = figure(ax, (WIDE, 3.4))
    n = result.reference_grad.size
    x = np.arange(n)
    W = result.world_size
    offsets = np.linspace(-0.3, 0.3, W) if W > 1 else np.zeros(1)
    for rank in range(W):
        ax.plot(x + offsets[rank], result.local_grads[rank], "o", ms=3.5, color=rank_color(rank),
                alpha=0.8, label=f"rank {rank} local" if W <= 4 else None, gid=f"rank {rank}")
    if W > 4:
        ax.plot([], [], "o", ms=3.5, color="grey", label=f"{W} ranks' local gradients")
    ax.bar(x, result.ddp_grads[0], width=0.75, color="0.25", alpha=0.35, label="DDP (every rank)",
           gid="ddp")
    ax.plot(x, result.reference_grad, "D", ms=7, mfc="none", mec="crimson", mew=1.5,
            label="one process, whole batch", gid="reference")
    _parameter_axis(ax, result.param_names, result.param_shapes)
    ax.axhline(0, color="0.6", lw=0.6)
    ax.set_title(_gradients_title(result), fontsize=10, pad=14)
    if legend:
        ax.legend(fontsize=LEGEND_SIZE, ncol=3, loc="upper right", framealpha=1)
    return fig


def update_gradients(fig, result) -> bool:
    """Put ``result`` into a figure :func:`gradients` drew, if it has as many ranks and
    elements (a slider panel then redraws without building a figure, ``screen.live_figure``)."""
    ax = fig.axes[0]
    ranks = {line.get_gid(): line for line in ax.lines if line.get_gid()}
    bars = [patch for patch in ax.patches if patch.get_gid() == "ddp"]
    if (len(ranks) != result.world_size + 1 or "reference" not in ranks
            or len(bars) != result.reference_grad.size):
        return False
    for rank in range(result.world_size):
        ranks[f"rank {rank}"].set_ydata(result.local_grads[rank])
    for bar, height in zip(bars, result.ddp_grads[0]):
        bar.set_height(height)
    ranks["reference"].set_ydata(result.reference_grad)
    # bars start at 0, so does the axhline
    y_data_limits(ax, result.local_grads, result.ddp_grads[0], result.reference_grad, zero=True)
    ax.autoscale_view(scalex=False)
    ax.set_title(_gradients_title(result), fontsize=10, pad=14)
    return True


gradients.update = update_gradients


def _gradients_title(result) -> str:
    sizes = (f"{result.batch_size} per rank" if result.batch_size
             else "samples per rank " + ",".join(map(str, result.batch_sizes)))
    return (f"world size {result.world_size}, {sizes}, {result.reduction} loss: "
            f"max |DDP - one process| = {result.max_diff:.1e}")


def gradients_grid(results):
    """Small multiples of :func:`gradients`, one panel per result, sharing the y axis."""
    fig, axes = plt.subplots(len(results), 1, figsize=(WIDE, 2.6 * len(results)), sharex=True,
                             sharey=True, constrained_layout=True)
    for i, (ax, result) in enumerate(zip(np.atleast_1d(axes), results)):
        gradients(result, ax=ax, legend=(i == 0))
    return fig


def node_layout(result):
    """The ranks laid out as nodes x GPUs, and DDP's gradient against per-node averages."""
    fig = plt.figure(figsize=(WIDE, 5.2), constrained_layout=True)
    top, bottom = fig.subfigures(2, 1, height_ratios=[1, 1.6])
    _nodes(top.subplots(), result)
    _node_averages(bottom.subplots(), result)
    return fig


def update_node_layout(fig, result) -> bool:
    """Draw ``result`` into the axes :func:`node_layout` made: the ranks, nodes, markers and
    legend made anew (another layout has others), the bars' heights set. A slider move then
    builds no figure and no axes, the most of a build (``screen.live_figure``)."""
    top, bottom = fig.axes
    bars = bottom.containers[0]
    if len(bars) != result.ddp_grad.size:
        return False
    for artist in [*top.collections, *top.texts, *bottom.lines, bottom.get_legend()]:
        artist.remove()
    _nodes(top, result)
    for bar, height in zip(bars, result.ddp_grad):
        bar.set_height(height)
    _node_markers(bottom, result)
    # bars start at 0, so does the axhline
    y_data_limits(bottom, result.ddp_grad, result.node_averages, result.reference_grad,
                  zero=True)
    bottom.autoscale_view(scalex=False)
    return True


node_layout.update = update_node_layout


def _nodes(ax, result):
    """The ranks as boxes labelled with their rank and local rank, framed by node."""
    g = result.gpus_per_node
    boxes, colors = [], []
    for rank, (node, local) in enumerate(zip(result.node_of_rank, result.local_rank_of_rank)):
        x, y = node * (g + 0.6) + local, 0
        boxes.append(Rectangle((x, y), 0.9, 0.9))
        colors.append((*rank_color(rank), 0.25))
        ax.text(x + 0.45, y + 0.45, f"rank {rank}\nlocal_rank {local}", ha="center",
                va="center", fontsize=9)
    frames = []
    for node in range(result.nodes):
        left = node * (g + 0.6) - 0.1
        frames.append(Rectangle((left, -0.15), g + 0.1, 1.2))
        ax.text(left + (g + 0.1) / 2, 1.15, f"node {node}", ha="center", fontsize=9)
    # Two collections, not a patch per rank: fewer artists to make on every slider move.
    ax.add_collection(PatchCollection(boxes, facecolors=colors, edgecolors=colors, lw=1),
                      autolim=False)
    ax.add_collection(PatchCollection(frames, facecolors="none", edgecolors="0.3", lw=1),
                      autolim=False)
    ax.set_xlim(-0.3, result.nodes * (g + 0.6))
    ax.set_ylim(-0.3, 1.4)
    ax.set_axis_off()
    ax.set_title(f"{result.nodes} nodes x {g} GPUs per node = world size {result.world_size}; "
                 f"DDP divided the summed gradient by {result.divisor:.2f}", fontsize=10)


def _node_averages(ax, result):
    ax.bar(np.arange(result.ddp_grad.size), result.ddp_grad, width=0.75, color="0.25",
           alpha=0.35, label="DDP (every rank)")
    _node_markers(ax, result)
    ax.set_xlabel("gradient element")


def _node_markers(ax, result):
    """Each node's average, the one-process reference, the zero line, and the legend."""
    x = np.arange(result.ddp_grad.size)
    for node in range(result.nodes):
        ax.plot(x, result.node_averages[node], "s", ms=4,
                color=rank_color(node * result.gpus_per_node),
                label=f"average over node {node} only")
    ax.plot(x, result.reference_grad, "D", ms=7, mfc="none", mec="crimson", mew=1.5,
            label="one process, whole batch")
    ax.axhline(0, color="0.6", lw=0.6)
    ax.legend(fontsize=LEGEND_SIZE, ncol=2, loc="upper right", framealpha=0.9)


def bias(results, labels):
    """DDP's gradient minus the one-process reference, for several runs side by side."""
    fig, ax = plt.subplots(figsize=(WIDE, 3), constrained_layout=True)
    x = np.arange(results[0].reference_grad.size)
    width = 0.8 / len(results)
    for i, (result, label) in enumerate(zip(results, labels)):
        ax.bar(x - 0.4 + width * (i + 0.5), result.ddp_grads[0] - result.reference_grad,
               width=width, label=f"{label}: max {result.max_diff:.1e}")
    ax.axhline(0, color="0.6", lw=0.6)
    ax.set_xlabel("gradient element")
    ax.set_ylabel("DDP - one process")
    ax.legend(fontsize=LEGEND_SIZE)
    return fig


def _parameter_axis(ax, names, shapes):
    """Gradient elements on x, with a label and a separator for each parameter tensor."""
    start = 0
    for name, shape in zip(names, shapes):
        size = int(np.prod(shape))
        if start:
            ax.axvline(start - 0.5, color="0.8", lw=0.8)
        ax.text(start + size / 2 - 0.5, 1.0, name, transform=ax.get_xaxis_transform(),
                ha="center", va="bottom", fontsize=9, color="0.35")
        start += size
    ax.set_xlim(-0.7, start - 0.3)
    ax.set_xticks([])
