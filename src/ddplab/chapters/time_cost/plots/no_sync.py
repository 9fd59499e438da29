"""Figures of gradient accumulation in the chapter "The time cost": what ``no_sync`` saves
per optimizer step, and what one accumulated step launches and computes."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ddplab.screen.style import LEGEND_SIZE, PAGE_WIDTH, figure


def accumulation(timing, ax=None):
    """ms per optimizer step against the number of micro-batches (``accumulation_time.Timing``)."""
    fig, ax = figure(ax, (PAGE_WIDTH, 2.8))
    k = timing.micro_batches
    ax.plot(k, [1e3 * s for s in timing.every_micro_batch_s], "o-", color="tab:red",
            label="all-reduce after every micro-batch")
    ax.plot(k, [1e3 * s for s in timing.no_sync_s], "o-", color="tab:blue",
            label="no_sync: one all-reduce per step")
    ax.set_xticks(k)
    ax.set_xlabel(f"micro-batches k per optimizer step ({timing.batch_size} samples each, "
                  f"{timing.world_size} ranks)", fontsize=9)
    ax.set_ylabel("ms per optimizer step\n(the median step)", fontsize=9)
    ax.set_ylim(0, None)
    ax.legend(fontsize=LEGEND_SIZE)
    return fig


def accumulated(result, axes=None):
    """One accumulated step (``accumulation.Accumulation``): bucket all-reduces launched by
    each micro-batch's backward, and DDP's gradient against the one-process gradient."""
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(PAGE_WIDTH, 2.8), constrained_layout=True)
    count_ax, grad_ax = axes
    k = np.arange(result.micro_batches)
    count_ax.bar(k - 0.2, result.launches_without_no_sync, width=0.4, color="tab:red",
                 label="every micro-batch synchronised")
    count_ax.bar(k + 0.2, result.launches, width=0.4, color="tab:blue",
                 label="no_sync" + (f" ({result.mistake})" if result.mistake else ""))
    count_ax.set_xticks(k, [str(m + 1) for m in k])
    count_ax.set_xlabel("micro-batch", fontsize=9)
    count_ax.set_ylabel("bucket all-reduces launched", fontsize=9)
    count_ax.legend(fontsize=LEGEND_SIZE)
    ref, got = result.reference_grad, result.accumulated_grad
    # Every k-th entry: a million points (the model's gradient) draw the same cloud as 20,000
    # but took 300 ms per figure here, the most of a slider move (all_sliders.py --profile).
    every = max(1, ref.size // 20_000)
    grad_ax.plot(ref[::every], got[::every], ".", ms=2, color="tab:blue", alpha=0.5)
    lim = np.abs(np.concatenate([ref, got])).max()
    grad_ax.plot([-lim, lim], [-lim, lim], ":", color="0.4", lw=1, label="equal")
    grad_ax.set_xlabel(f"one process, global batch of {result.global_batch_size}", fontsize=8.5)
    grad_ax.set_ylabel("DDP, accumulated (rank 0)", fontsize=8.5)
    grad_ax.set_title(f"{result.ratio_to_reference:.3f} times the one-process gradient",
                      fontsize=8.5, loc="left")
    grad_ax.legend(fontsize=LEGEND_SIZE)
    return count_ax.figure
