"""Figures for the chapter "Hangs and silent differences": result in, matplotlib figure out."""

from __future__ import annotations

import numpy as np

from ddplab.screen.style import (  # noqa: F401 (text: for panels)
    LEGEND_SIZE,
    PAGE_WIDTH,
    figure,
    rank_color,
    text,
    y_data_limits,
)


def steps(result, ax=None):
    """Uneven inputs: each rank's batches (outline) and the steps it completed (filled)."""
    fig, ax = figure(ax, (PAGE_WIDTH, 2.4))
    ranks = np.arange(len(result.batches_per_rank))
    for rank in ranks:
        ax.barh(rank, result.batches_per_rank[rank], color="none", ec=rank_color(rank), lw=1.5)
        ax.barh(rank, result.steps_completed_per_rank[rank], color=rank_color(rank), alpha=0.6)
    for rank in result.missing_ranks:
        ax.text(result.batches_per_rank[rank] + 0.05, rank, "named missing by monitored_barrier",
                va="center", fontsize=8)
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("batches (outline) and steps completed (filled)")
    ax.set_xlim(0, max(result.batches_per_rank) * 1.6)
    ax.set_title(_outcome(result), fontsize=10)
    return fig


def rank0_steps(result, ax=None):
    """A collective on rank 0 only: training steps per rank and how the run ended."""
    fig, ax = figure(ax, (PAGE_WIDTH, 2.2))
    ranks = np.arange(result.world_size)
    ax.barh(ranks, result.steps_completed_per_rank, color=[rank_color(r) for r in ranks],
            alpha=0.6)
    evaluated = "evaluated" if result.val_loss is not None else "stuck evaluating"
    ax.text(result.steps_completed_per_rank[0] + 0.05, 0, f"then {evaluated}", va="center",
            fontsize=8)
    named = ", ".join(map(str, result.missing_ranks))
    for rank, message in enumerate(result.check_in_messages):
        if message and rank:
            ax.text(result.steps_completed_per_rank[rank] + 0.05, rank,
                    f"monitored_barrier names rank {named}", va="center", fontsize=8)
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlim(0, max(result.steps_completed_per_rank) * 2.5)
    ax.set_xlabel("training steps completed")
    ax.set_title(_outcome(result), fontsize=10)
    return fig


def _outcome(result) -> str:
    return (f"fix {result.fix!r}: {result.outcome} after {result.seconds:.1f} s "
            f"(timeout {result.timeout:g} s)")


def batchnorm(result, ax=None):
    """Each sample's output: DDP on W ranks against one process on the whole batch."""
    fig, ax = figure(ax, (PAGE_WIDTH, 2.8))
    share = result.global_batch_size // result.world_size
    x = np.arange(result.global_batch_size)
    ax.plot(x, result.reference_output, "D", ms=8, mfc="none", mec="crimson", mew=1.5,
            label="one process, whole batch")
    for rank in range(result.world_size):
        rows = slice(rank * share, (rank + 1) * share)
        ax.plot(x[rows], result.outputs[rows], "o", color=rank_color(rank), label=f"rank {rank}"
                if result.world_size <= 4 else None)
    ax.set_xlabel("sample of the global batch")
    ax.set_ylabel("model output")
    norm = "SyncBatchNormCPU" if result.sync else "BatchNorm1d"
    ax.set_title(f"{norm}, {result.world_size} ranks x {share}: max |DDP - one process| = "
                 f"{result.max_diff:.1e}", fontsize=10)
    ax.legend(fontsize=LEGEND_SIZE, ncol=3, loc="best")
    return fig


def start_state(result, ax=None):
    """Each rank's weights before DDP (lines) and after its constructor (dots)."""
    fig, ax = figure(ax, (PAGE_WIDTH, 2.8))
    x = np.arange(result.params_before.shape[1])
    for rank in range(result.world_size):
        ax.plot(x, result.params_before[rank], "-", color=rank_color(rank), alpha=0.6,
                label=f"rank {rank} before")
        ax.plot(x, result.params_after[rank], "o", ms=7 - rank, color=rank_color(rank),
                mfc="none")
    ax.plot([], [], "o", color="0.3", mfc="none", label="after DDP (every rank)")
    ax.set_xlabel("parameter element")
    ax.set_title(f"before: up to {result.max_diff_before:.2f} apart; after DDP's constructor: "
                 f"{result.max_diff_after:.0e} from rank 0's", fontsize=10)
    ax.legend(fontsize=LEGEND_SIZE, ncol=3)
    return fig


def logged_loss(result, ax=None):
    """Each rank's own loss, the all-reduced mean and one process's loss, per step."""
    fig, ax = figure(ax, (PAGE_WIDTH, 3.0))
    step = np.arange(result.steps)
    for rank in range(result.world_size):
        ax.plot(step, result.rank_losses[rank], color=rank_color(rank), lw=1, alpha=0.7,
                label=f"rank {rank}'s own" + (" (what rank 0 prints)" if rank == 0 else ""),
                gid=f"rank {rank}")
    ax.plot(step, result.mean_losses, color="black", lw=2.5, label="all-reduced mean",
            gid="mean")
    ax.plot(step, result.reference_losses, "--", color="crimson", lw=1.5,
            label="one process, global batch", gid="reference")
    ax.set_xlabel("step")
    ax.set_ylabel("MSE loss")
    # Where loc="best" put it at every setting tried (1-8 ranks, 1-16 samples, 5-60 steps),
    # fixed and opaque: a slider move then pastes its inside back rather than laying out its
    # text again (screen.live_figure): 124 -> 40 ms a draw, side by side on a loaded machine.
    ax.legend(fontsize=LEGEND_SIZE, ncol=2, loc="upper right", framealpha=1)
    return fig


def update_logged_loss(fig, result) -> bool:
    """Put ``result`` into a figure :func:`logged_loss` drew, if it has as many ranks (the
    legend's entries); a slider panel then redraws without building a figure."""
    ax = fig.axes[0]
    lines = {line.get_gid(): line for line in ax.lines}
    if len(lines) != result.world_size + 2:
        return False
    step = np.arange(result.steps)
    for rank in range(result.world_size):
        lines[f"rank {rank}"].set_data(step, result.rank_losses[rank])
    lines["mean"].set_data(step, result.mean_losses)
    lines["reference"].set_data(step, result.reference_losses)
    ax.dataLim.intervalx = (0, result.steps - 1)
    y_data_limits(ax, result.rank_losses, result.mean_losses, result.reference_losses)
    ax.autoscale_view()
    return True


logged_loss.update = update_logged_loss


def step_times(result, ax=None):
    """Time per SGD step (the slowest rank's) with and without ``find_unused_parameters``."""
    fig, ax = figure(ax, (PAGE_WIDTH, 2.4))
    data = [result.ms_without, result.ms_with]
    ax.boxplot(data, vert=False, showfliers=False)
    ax.set_yticks([1, 2], ["find_unused_parameters=False", "find_unused_parameters=True"])
    ax.set_xlabel("ms per step (the slowest rank's)")
    ax.set_title(f"medians {result.median_ms_without:.2f} and {result.median_ms_with:.2f} ms",
                 fontsize=10)
    return fig

