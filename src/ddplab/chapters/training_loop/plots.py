"""Figures for the chapter "Your training loop under DDP": result in, matplotlib figure out."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ddplab.screen.style import LEGEND_SIZE, PAGE_WIDTH, figure, placement_note, rank_color, text  # noqa: F401 (text: for panels)


def norms(result, ax=None):
    """Clipping: the gradient norm each way of clipping sees, per rank, and max_norm."""
    fig, ax = figure(ax, (PAGE_WIDTH, 2.6))
    W = result.world_size
    groups = [("after DDP's backward", result.norm_per_rank),
              ("each rank's own", result.norm_local_per_rank),
              ("reduced again", result.norm_reduced_again_per_rank)]
    width = 0.8 / W
    for g, (_, values) in enumerate(groups):
        for rank, value in enumerate(values):
            ax.bar(g + (rank - (W - 1) / 2) * width, value, width, color=rank_color(rank),
                   label=f"rank {rank}" if g == 0 else None)
    ax.axhline(result.norm_one_process, color="black", lw=1, label="one process")
    ax.axhline(result.max_norm, color="grey", ls="--", lw=1, label="max_norm")
    ax.set_xticks(range(len(groups)), [name for name, _ in groups])
    ax.set_ylabel("gradient norm")
    ax.legend(fontsize=LEGEND_SIZE, ncol=2)
    return fig


def metrics(result, ax=None):
    """Evaluation: the AUC each way of gathering gives, against one process's."""
    fig, ax = figure(ax, (PAGE_WIDTH, 2.4))
    rows = [("gathered, pad and trim", result.metric_gathered),
            ("all_gather_object", result.metric_all_gather_object),
            ("mean of the ranks' AUCs", result.metric_mean_of_ranks),
            ("DistributedSampler's padding", result.metric_padded_sampler)]
    y = np.arange(len(rows))
    ax.barh(y, [v for _, v in rows], color=rank_color(0), alpha=0.7)
    ax.axvline(result.metric_one_process, color="black", lw=1, label="one process")
    ax.set_yticks(y, [name for name, _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("AUC")
    ax.set_xlim(0, 1)
    ax.legend(fontsize=LEGEND_SIZE)
    ax.set_title(f"{result.dataset_size} samples, {result.predictions_per_rank} per rank",
                 fontsize=10)
    return fig


def stops(result, ax=None):
    """Early stopping: the steps each rank completed, and where it stopped."""
    fig, ax = figure(ax, (PAGE_WIDTH, 2.0))
    ranks = np.arange(result.world_size)
    for rank in ranks:
        ax.barh(rank, result.steps_completed_per_rank[rank], color=rank_color(rank), alpha=0.6)
        stopped = result.stopped_at_step_per_rank[rank]
        label = "still waiting in backward" if stopped is None else f"stopped at step {stopped}"
        ax.text(result.steps_completed_per_rank[rank] + 0.05, rank, label, va="center",
                fontsize=8)
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("steps completed")
    ax.set_xlim(0, max(result.steps_completed_per_rank) + 3)
    ax.set_title(f"fix {result.fix!r}: {result.outcome} after {result.seconds:.1f} s",
                 fontsize=10)
    return fig


def expected_differences(results, ax=None):
    """An N-rank run against one process: the parameters' largest difference after each step,
    one line per cause, one panel per world size (``results``: ExpectedDifferences)."""
    results = list(results)
    fig, axes = plt.subplots(1, len(results), figsize=(PAGE_WIDTH, 3.0), sharey=True,
                             constrained_layout=True, squeeze=False)
    for ax, result in zip(axes[0], results):
        steps = np.arange(1, result.steps + 1)
        for i, cause in enumerate(result.causes):
            if cause == "logged loss":  # the same training as "float order": only the print
                continue
            ax.plot(steps, np.maximum(result.param_diff[i], 1e-12), color=rank_color(i),
                    lw=1.2, ls="--" if "bug" in cause else "-", label=cause)
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_title(f"{result.world_size} ranks against one process", fontsize=10)
    axes[0][0].set_ylabel("largest |parameter difference|")
    axes[0][-1].legend(fontsize=LEGEND_SIZE - 2, loc="center right")
    placement_note(fig, results[-1])
    return fig
