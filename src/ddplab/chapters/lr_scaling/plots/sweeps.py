"""The learning-rate sweeps' figures (``lr_sweeps``), and the lab's live one: :func:`curves`,
whose ``update`` fills one kept figure run by run."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import LogLocator

from ddplab.chapters.lr_scaling.plots.axes import (
    LOG_FLOOR,
    LOSS_LIMITS,
    loss_axes,
    plain_ticks,
    world_color,
)
from ddplab.screen.style import LEGEND_SIZE, PAGE_WIDTH


def same_batch(panels: dict):
    """Per-step losses at a fixed global batch, every world size on the one-process run.

    ``panels``: title -> ``lr_sweeps.SameBatch``.
    """
    fig, axes = plt.subplots(2, len(panels), figsize=(3.8 * len(panels), 5.0), sharex=True,
                             squeeze=False, height_ratios=[1.6, 1], constrained_layout=True)
    for col, (title, result) in enumerate(panels.items()):
        top, bottom = axes[0, col], axes[1, col]
        steps = np.arange(len(result.reference))
        top.plot(steps, result.reference, color="0.15", lw=4, alpha=0.25, label="one process")
        for world_size, run in result.runs.items():
            top.plot(steps, run.losses, lw=1.1, color=world_color(world_size),
                     label=f"{world_size} x {run.batch_size}")
            bottom.plot(steps, np.maximum(result.loss_diff(world_size), LOG_FLOOR), ".", ms=3,
                        color=world_color(world_size))
        top.set_title(f"{title}: global batch {result.global_batch_size}", fontsize=10)
        top.set_ylabel("loss of the global batch")
        top.legend(fontsize=LEGEND_SIZE, ncol=2, title="ranks x batch size",
                   title_fontsize=LEGEND_SIZE)
        bottom.set_yscale("log")
        bottom.set_ylim(5e-10, 1e-4)
        bottom.set_ylabel("|DDP - one process|\n(0 drawn at 1e-9)")
        bottom.set_xlabel("step")
    return fig


def _curve(ax, x, y, world_size, diverged: bool, label=None):
    """One expected-loss curve; a diverged one ends in a cross at the top edge."""
    y = np.minimum(y, LOSS_LIMITS[1] * 0.97)
    ax.plot(x, y, lw=1.3, color=world_color(world_size), label=label)
    if diverged and len(x):
        ax.plot(x[-1], y[-1], "x", ms=9, mew=2.2, color=world_color(world_size))


def _sizes(comparison) -> list:
    """The world sizes a figure names: those run, then (a partial result) those still to run."""
    return [*comparison.world_sizes, *comparison.pending]


def _label(world_size: int) -> str:
    return f"{world_size} rank{'s' if world_size > 1 else ''}"


def _set_curve(curve, cross, x, y, diverged: bool) -> None:
    """:func:`_curve` into lines already drawn (the cross empty where none is due)."""
    y = np.minimum(y, LOSS_LIMITS[1] * 0.97)
    curve.set_data(x, y)
    cross.set_data(x[-1:] if diverged else [], y[-1:] if diverged else [])


def _loss_panels(comparison, by_step, by_sample):
    """The expected loss (mean over seeds) per step and per sample seen, every world size; a
    world size still to run (a partial result) has its curves, empty, and its legend entry."""
    for i, world_size in enumerate(_sizes(comparison)):  # coloured by _fill_losses
        for ax, name in ((by_step, "step"), (by_sample, "sample")):
            ax.plot([], [], lw=1.3, gid=f"{name} {i}",
                    label=_label(world_size) if ax is by_step else None)
            ax.plot([], [], "x", ms=9, mew=2.2, gid=f"{name} cross {i}")
    for ax, label in ((by_step, "step"), (by_sample, "samples seen (all ranks)")):
        loss_axes(ax, comparison.noise_floor)
        if comparison.target is not None:
            ax.axhline(comparison.target, color="0.3", lw=0.8, ls="--", gid="target")
        ax.set_xlabel(label)
    by_sample.set_xscale("log")
    _fill_losses(comparison, by_step, by_sample)


def _fill_losses(comparison, by_step, by_sample) -> None:
    """Put the curves of :func:`_loss_panels` (drawn or kept) at ``comparison``'s losses."""
    lines = {line.get_gid(): line for ax in (by_step, by_sample) for line in ax.lines}
    for i, world_size in enumerate(_sizes(comparison)):
        for name in ("step", "step cross", "sample", "sample cross"):
            lines[f"{name} {i}"].set_color(world_color(world_size))
        ran = world_size in comparison.runs
        y = comparison.losses(world_size) if ran else np.zeros(0)
        steps = np.arange(len(y))
        diverged = ran and comparison.diverged(world_size) > 0
        _set_curve(lines[f"step {i}"], lines[f"step cross {i}"], steps, y, diverged)
        # Samples seen before each step; the start (0 samples) has no place on a log axis.
        batch = comparison.runs[world_size][0].global_batch_size if ran else 0
        _set_curve(lines[f"sample {i}"], lines[f"sample cross {i}"], steps[1:] * batch, y[1:],
                   diverged)
    for ax in (by_step, by_sample):
        ax.relim()  # a few lines: the data limits a new figure's plot() calls would collect
        ax.autoscale_view()
    seeds = len(next(iter(comparison.runs.values())))
    by_step.set_ylabel("expected loss" + (f"\n(mean of {seeds} seeds)" if seeds > 1 else ""))


def curves(comparison):
    """One rule at several world sizes (the lab): the learning rate of every step, and the
    expected loss per step and per sample seen; a cross marks a divergence. A partial result
    (runs still to come) names every world size in the legend and draws those run so far."""
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.1), constrained_layout=True)  # a lab's width
    for i in range(len(_sizes(comparison))):  # filled and coloured by _fill_rates
        axes[0].plot([], [], lw=1.3, gid=f"lr {i}")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("learning rate")
    axes[0].set_xlabel("step")
    _loss_panels(comparison, axes[1], axes[2])
    # Not opaque (matplotlib's default alpha, said here): update_curves may rename its entries.
    axes[1].legend(fontsize=LEGEND_SIZE, loc="upper right", framealpha=0.8)
    fig.suptitle(_curves_title(comparison), fontsize=10)
    _fill_rates(comparison, axes[0])
    return fig


def update_curves(fig, comparison) -> bool:
    """Put ``comparison`` into a figure :func:`curves` drew, if it names as many world sizes
    and has a target line where that one did: a sweep's partial results fill it in run by run,
    and a move redraws without building a figure (``screen.live_figure``). Another largest
    world size of as many sizes renames the legend's entries and recolours the lines: the
    legend is not opaque, so the panel draws it anew rather than pasting its last pixels."""
    if len(fig.axes) != 3 or fig.axes[1].get_legend() is None or fig._suptitle is None:
        return False
    rates, by_step, by_sample = fig.axes
    legend, sizes = by_step.get_legend(), _sizes(comparison)
    targets = [line for ax in (by_step, by_sample) for line in ax.lines
               if line.get_gid() == "target"]
    if (len(legend.get_texts()) != len(sizes)
            or len(targets) != (0 if comparison.target is None else 2)):
        return False
    for text, handle, world_size in zip(legend.get_texts(), legend.legend_handles, sizes):
        text.set_text(_label(world_size))
        handle.set_color(world_color(world_size))
    for line in targets:
        line.set_ydata([comparison.target] * 2)
    _fill_losses(comparison, by_step, by_sample)
    _fill_rates(comparison, rates)
    fig._suptitle.set_text(_curves_title(comparison))  # where the layout put it
    return True


curves.update = update_curves


def _fill_rates(comparison, ax) -> None:
    """The learning rate of every step of the runs done, ticks at their peak rates."""
    lines = {line.get_gid(): line for line in ax.lines}
    for i, world_size in enumerate(_sizes(comparison)):
        run = comparison.runs[world_size][0] if world_size in comparison.runs else None
        lines[f"lr {i}"].set_color(world_color(world_size))
        lines[f"lr {i}"].set_data(np.arange(run.steps) if run else [], run.lrs if run else [])
    # Limits as the log scale's own locator widens them (a flat schedule: a decade around it),
    # as matplotlib autoscales when a scale is set (Axis._set_axes_scale), then the ticks.
    ax.relim()
    ax.yaxis.set_major_locator(LogLocator())
    ax.autoscale_view()
    plain_ticks(ax.yaxis, [r[0].peak_lr for r in comparison.runs.values()])


def _curves_title(comparison) -> str:
    first = comparison.runs[comparison.world_sizes[0]][0]
    return (f"{first.optimizer}, rule {first.rule!r}: lr {first.lr:g} for "
            f"{first.batch_size} samples per rank, {first.warmup_steps} warmup steps")


def curves_grid(comparisons: dict):
    """The loss panels of :func:`curves` for several rules, one row each (``comparisons``:
    title -> result), narrow enough for a book page; :func:`schedules` draws the rates."""
    fig, axes = plt.subplots(len(comparisons), 2, figsize=(PAGE_WIDTH, 2.5 * len(comparisons)),
                             constrained_layout=True, squeeze=False, sharex="col")
    for row, (title, comparison) in zip(axes, comparisons.items()):
        _loss_panels(comparison, row[0], row[1])
        row[0].set_title(title, fontsize=9, loc="left")
    for ax in axes[:-1].flat:
        ax.set_xlabel("")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncol=len(labels), fontsize=LEGEND_SIZE)
    return fig


def schedules(comparisons: dict):
    """The learning rate of every step, per world size, for a few rules."""
    fig, axes = plt.subplots(1, len(comparisons), figsize=(PAGE_WIDTH / 2 * len(comparisons),
                                                           2.6),
                             constrained_layout=True, squeeze=False, sharey=True)
    for ax, (title, comparison) in zip(axes[0], comparisons.items()):
        for world_size in comparison.world_sizes:
            run = comparison.runs[world_size][0]
            ax.plot(np.arange(run.steps), run.lrs, lw=1.3, color=world_color(world_size),
                    label=f"{world_size} rank{'s' if world_size > 1 else ''}")
        ax.set_yscale("log")
        plain_ticks(ax.yaxis, [r[0].peak_lr for r in comparison.runs.values()])
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_xlabel("step")
    axes[0][0].set_ylabel("learning rate")
    axes[0][0].legend(fontsize=LEGEND_SIZE)
    return fig


def divergence(result):
    """Which rates diverged at each world size, and the rates each rule asks for."""
    fig, ax = plt.subplots(figsize=(PAGE_WIDTH, 3.8), constrained_layout=True)
    ks = result.world_sizes
    for world_size in ks:
        tried = result.lrs[:len(result.diverged[world_size])]
        ok = [lr for lr, d in zip(tried, result.diverged[world_size]) if not d]
        bad = [lr for lr, d in zip(tried, result.diverged[world_size]) if d]
        ax.plot([world_size] * len(ok), ok, "o", ms=6, color="#1b9e77", mfc="none")
        ax.plot([world_size] * len(bad), bad, "X", ms=9, color="crimson")
    ax.plot([], [], "o", color="#1b9e77", mfc="none", label=f"trains ({result.steps} steps)")
    ax.plot([], [], "X", color="crimson", label="diverges")
    grid = np.array(ks, float)
    for rule, line in (("linear", "-"), ("sqrt", "--"), ("none", ":")):
        ax.plot(grid, result.rule_lrs[rule], line, color="0.25",
                lw=1.2, label=f"rule {rule!r} from lr {result.base_lr:g}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [f"{w}\n(global {w * result.batch_size})" for w in ks])
    ax.set_yscale("log")
    ax.set_xlabel(f"world size, {result.batch_size} samples per rank")
    ax.set_ylabel("learning rate")
    ax.legend(fontsize=LEGEND_SIZE, loc="upper left", framealpha=0.9)
    return fig


def summed(averaged, as_if_summed, linear):
    """Seed 002's claim: DDP's average at an unscaled rate, against a sum (= the linear rule).

    ``averaged``: a ``lr_sweeps.GrowingBatch`` at the unscaled rate.
    """
    fig, ax = plt.subplots(figsize=(PAGE_WIDTH, 3.4), constrained_layout=True)
    for world_size in averaged.world_sizes:
        y = averaged.losses(world_size)
        _curve(ax, np.arange(len(y)), y, world_size, averaged.diverged(world_size) > 0,
               label=f"averaged (DDP), {world_size} ranks, lr {averaged.runs[world_size][0].lr:g}")
    y = np.minimum(linear.population_losses, LOSS_LIMITS[1] * 0.97)
    ax.plot(np.arange(len(y)), y, color="0.2", lw=5, alpha=0.25,
            label=f"averaged, {linear.world_size} ranks, lr {linear.peak_lr:g} (linear rule)")
    y = np.minimum(as_if_summed.population_losses, LOSS_LIMITS[1] * 0.97)
    ax.plot(np.arange(len(y)), y, "--", color="crimson", lw=1.3,
            label=f"summed, {as_if_summed.world_size} ranks, lr {as_if_summed.lr:g}")
    loss_axes(ax, linear.noise_floor)
    ax.set_xlabel("step")
    ax.set_ylabel("expected loss")
    ax.legend(fontsize=LEGEND_SIZE, loc="upper right")
    return fig
