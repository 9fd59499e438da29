"""Figures for the chapter "Sharding the data": result in, matplotlib figure out."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import PatchCollection
from matplotlib.patches import Rectangle

from ddplab.screen.style import LEGEND_SIZE, rank_color
from ddplab.screen.style import PAGE_WIDTH as WIDTH

GAP = 0.5  # blank columns between two steps of one rank
TWICE = "crimson"  # outline of a sample drawn more than once in its epoch


def draws(result, title: str | None = None):
    """Which rank draws which sample at which step: one panel per epoch, then coverage.

    In a panel, row r is rank r's shard in the order it is handed out, cut into its batches
    (one block per step); each cell is one sample, labelled with its dataset index. Below, one
    row per epoch and one column per dataset index: the colour of the rank that drew it.
    """
    W, E = result.world_size, result.epochs
    span = max(result.steps_per_epoch * (result.batch_size + GAP) - GAP, 12)
    row = float(np.clip(6.0 / (E * W + 1.5 * E), 0.2, 0.38))
    heights = [row * W + 0.55 for _ in range(E)] + [row * 0.8 * E + 0.75]
    fig, axes = plt.subplots(E + 1, 1, figsize=(WIDTH, sum(heights) + 0.5),
                             gridspec_kw={"height_ratios": heights}, constrained_layout=True)
    cell = (WIDTH - 0.9) / span  # inches per sample, the rank labels left aside
    for epoch, ax in enumerate(axes[:-1]):
        _epoch_panel(ax, result, epoch, span, cell, _font(cell, row, result.dataset_size))
    cover = (WIDTH - 0.9) / result.dataset_size
    _coverage(axes[-1], result, _font(cover, 1, result.dataset_size) or 5)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def _font(cell: float, row: float, dataset_size: int) -> float | None:
    """The font size at which the largest index fits a cell; None when under 4.5 points."""
    width = 0.62 * len(str(dataset_size - 1)) + 0.9  # a label's width, in font sizes
    size = min(cell * 72 / width, row * 72 * 0.55, 9)
    return size if size >= 4.5 else None


def _epoch_panel(ax, result, epoch, span, cell, font):
    twice = result.drawn_again(epoch)
    B = result.batch_size
    cells, colors, twice_cells = [], [], []
    for r, batches in enumerate(result.indices[epoch]):
        x = 0.0
        for step, batch in enumerate(batches):
            for i in batch:
                cells.append(Rectangle((x, -r), 0.94, 0.9))
                colors.append((*rank_color(r), 0.3))
                if twice[i]:
                    twice_cells.append(Rectangle((x, -r), 0.94, 0.9))
                if font:
                    ax.text(x + 0.47, -r + 0.45, str(i), ha="center", va="center",
                            fontsize=font)
                x += 1
            x += GAP + B - len(batch) if step < len(batches) - 1 else 0
    # One collection of cells and one of outlines, not an artist per sample: a slider move
    # draws a new figure, and hundreds of patches made most of its time.
    ax.add_collection(PatchCollection(cells, facecolors=colors, edgecolors="none", lw=0),
                      autolim=False)
    ax.add_collection(PatchCollection(twice_cells, facecolors="none", edgecolors=TWICE,
                                      lw=1.8 if cell > 0.15 else 0.8), autolim=False)
    sizes = result.global_batch_sizes[epoch]
    label = 8 * 0.6 / 72 * len(f"step {len(sizes)}: {max(sizes, default=0)}")  # inches
    every = math.ceil(label / ((B + GAP) * cell))  # label every k-th step: no overlaps
    for step, size in enumerate(sizes):
        if step % every == 0:
            ax.text(step * (B + GAP), 1.05, f"step {step}: {size}", ha="left",
                    va="bottom", fontsize=8, color="0.3")
    if sizes:
        ax.text(-0.3, 1.05, "samples per step:", ha="right", va="bottom", fontsize=8,
                color="0.3")
    ax.set_yticks([-r + 0.45 for r in range(result.world_size)],
                  [f"rank {r}" for r in range(result.world_size)], fontsize=8)
    ax.tick_params(left=False)
    ax.set_xticks([])
    ax.set_xlim(-0.2, span + 0.2)  # a short shard keeps cells of a readable width
    ax.set_ylim(-result.world_size + 0.8, 1.75)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    if not result.sampler:
        how = "no DistributedSampler"
    elif not result.shuffle:
        how = "no shuffle"
    else:
        how = f"set_epoch({epoch})" if result.set_epoch else "set_epoch never called"
    extra = f", {int(twice.sum())} more than once (outlined)" if twice.any() else ""
    ax.set_title(f"epoch {epoch}, {how}: {result.samples_per_epoch(epoch)} drawn from "
                 f"{result.dataset_size} sample{'s' * (result.dataset_size != 1)}{extra}",
                 fontsize=9, loc="left")


def _coverage(ax, result, font):
    """Rows: epochs; columns: dataset indices; fill: the ranks that drew it."""
    N = result.dataset_size
    parts, colors, never, twice = [], [], [], []  # one collection each, as in _epoch_panel
    for epoch in range(result.epochs):
        owners = [[] for _ in range(N)]
        for r, batches in enumerate(result.indices[epoch]):
            for batch in batches:
                for i in batch:
                    owners[i].append(r)
        y = -epoch
        for i, ranks in enumerate(owners):
            if not ranks:
                never.append(Rectangle((i, y), 0.94, 0.8))
                continue
            part = 0.94 / len(ranks)
            for k, r in enumerate(ranks):
                parts.append(Rectangle((i + k * part, y), part, 0.8))
                colors.append((*rank_color(r), 0.55))
            if len(ranks) > 1:
                twice.append(Rectangle((i, y), 0.94, 0.8))
    ax.add_collection(PatchCollection(parts, facecolors=colors, edgecolors="none", lw=0),
                      autolim=False)
    ax.add_collection(PatchCollection(never, facecolors="white", edgecolors="0.5",
                                      hatch="////", lw=0.6), autolim=False)
    ax.add_collection(PatchCollection(twice, facecolors="none", edgecolors=TWICE, lw=1.5),
                      autolim=False)
    if N <= 40:
        ax.set_xticks(np.arange(N) + 0.47, [str(i) for i in range(N)], fontsize=font)
    else:
        ticks = np.linspace(0, N - 1, 9).round().astype(int)
        ax.set_xticks(ticks + 0.47, [str(t) for t in ticks], fontsize=8)
    ax.tick_params(left=False, bottom=False)
    ax.set_yticks([-e + 0.4 for e in range(result.epochs)],
                  [f"epoch {e}" for e in range(result.epochs)], fontsize=8)
    ax.set_xlim(-0.2, N + 0.2)
    ax.set_ylim(-result.epochs + 0.9, 0.9)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title("the rank(s) that drew each dataset index (red: more than once, hatched: "
                 "never)", fontsize=9, loc="left")


def steps_per_epoch(keep, divide, batch_size):
    """Steps per epoch and samples per step against the world size, for two recipes.

    ``keep`` and ``divide`` map a world size to a result: ``batch_size`` per rank kept, or
    ``batch_size / world_size`` per rank.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(WIDTH, 3), constrained_layout=True)
    for runs, label, marker, dy in ((keep, f"batch_size {batch_size} per rank", "o", 6),
                                    (divide, f"batch_size {batch_size} / world_size", "s", -13)):
        ws = sorted(runs)
        steps = [runs[w].steps_per_epoch for w in ws]
        per_step = [runs[w].global_batch_sizes[0][0] for w in ws]
        left.plot(ws, steps, marker=marker, label=label)
        right.plot(ws, per_step, marker=marker, label=label)
        for w, s, p in zip(ws, steps, per_step):
            for ax, value in ((left, s), (right, p)):
                ax.annotate(str(value), (w, value), textcoords="offset points",
                            xytext=(0, dy), ha="center", fontsize=8)
    dataset = next(iter(keep.values())).dataset_size
    left.set_title(f"steps per epoch ({dataset} samples)", fontsize=10)
    right.set_title("samples per step (first step, all ranks)", fontsize=10)
    for ax in (left, right):
        ax.set_xlabel("world_size")
        ax.set_xticks(sorted(keep))
        ax.set_ylim(0, ax.get_ylim()[1] * 1.15)
        ax.grid(alpha=0.3)
    left.legend(fontsize=LEGEND_SIZE)
    return fig


def evaluation(result):
    """Who evaluates which sample, three ways, and the accuracy each way gives."""
    methods = {"padded": "DistributedSampler", "drop_last": "... drop_last=True",
               "exact": "range(rank, N, W)"}
    N = result.dataset_size
    fig, ax = plt.subplots(figsize=(WIDTH, 0.5 * len(methods) + 1.2), constrained_layout=True)
    for row, method in enumerate(methods):
        y = -row
        owners = [[] for _ in range(N)]
        for r, ids in enumerate(result.ids[method]):
            for i in ids:
                owners[i].append(r)
        for i, ranks in enumerate(owners):
            part = 0.94 / max(len(ranks), 1)
            for k, r in enumerate(ranks):
                ax.add_patch(Rectangle((i + k * part, y), part, 0.8,
                                       facecolor=(*rank_color(r), 0.55), lw=0))
            if len(ranks) != 1:
                ax.add_patch(Rectangle((i, y), 0.94, 0.8, fill=False, lw=1.5 if ranks else 0.6,
                                       edgecolor=TWICE if ranks else "0.5",
                                       hatch=None if ranks else "////"))
            if N <= 40:
                ax.text(i + 0.47, y + 0.4, "✓" if result.per_sample[i] else "✗",
                        ha="center", va="center", fontsize=8)
        ax.text(N + 0.4, y + 0.4, f"{result.correct[method]}/{result.count[method]} = "
                f"{result.accuracy(method):.4f}", va="center", fontsize=9)
    ax.set_yticks([-r + 0.4 for r in range(len(methods))], list(methods.values()), fontsize=8)
    ax.tick_params(left=False, bottom=False)
    ax.set_xticks([])
    ax.set_xlim(-0.2, N * 1.3 + 2)
    ax.set_ylim(-len(methods) + 0.9, 0.9)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"{N} samples on {result.world_size} ranks (colour: the rank evaluating "
                 f"it); one process: {result.reference_correct}/{N} = "
                 f"{result.reference:.4f}\n✓ right, ✗ wrong; red: evaluated twice, "
                 f"hatched: never", fontsize=9, loc="left")
    return fig
