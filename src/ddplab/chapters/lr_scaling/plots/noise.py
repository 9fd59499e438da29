"""The gradient noise scale's figures (``noise_scale``, ``critical_batch``), and the lab's live
one: :func:`noise_scale`, with an ``update``."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ddplab.chapters.lr_scaling.plots.axes import loss_axes, plain_ticks
from ddplab.screen.style import LEGEND_SIZE, PAGE_WIDTH


def noise_estimates(runs):
    """DDP's per-step estimates of |G|^2 and tr(Sigma) (dots) on the true values (lines)."""
    fig, axes = plt.subplots(1, 2, figsize=(PAGE_WIDTH, 3.2), constrained_layout=True)
    for ax, name, est, true in ((axes[0], "|G|^2", "g2", "exact_g2"),
                                (axes[1], "tr(Sigma)", "trace", "exact_trace")):
        for i, r in enumerate(runs):
            w = r.window
            x = r.population_losses[w]
            ax.plot(x, getattr(r, est)[w], ".", ms=5, alpha=0.7, color="#d95f02",
                    label="DDP's estimate, one step" if i == 0 else None)
            ax.plot(x, getattr(r, true)[w], "-", lw=1, color="0.2",
                    label="true value" if i == 0 else None)
        ax.set_xscale("log")
        ax.invert_xaxis()
        if est == "g2":  # a single step's estimate of |G|^2 can be negative
            ax.set_yscale("symlog", linthresh=0.1)
        else:
            ax.set_yscale("log")
            plain_ticks(ax.yaxis, [2, 5, 10, 20, 50, 100])
        ax.set_xlabel("expected loss at the step\n(training goes to the right)")
        ax.set_title(name, fontsize=10)
        ax.legend(fontsize=LEGEND_SIZE)
    return fig


def critical_batch(critical, b_simple: float):
    """Steps to the target against the global batch (with the fitted tradeoff and B_simple),
    and the learning rate that got there fastest."""
    fig, axes = plt.subplots(2, 1, figsize=(PAGE_WIDTH, 6.2), constrained_layout=True, sharex=True)
    B = critical.global_batch_sizes
    fine = critical.batch_grid()
    ax = axes[0]
    ax.plot(B, critical.best_steps, "o", color="0.2", label="best learning rate of the grid")
    ax.plot(fine, critical.fitted_steps(fine), color="#d95f02",
            label=f"fit S_min (1 + B_crit / B): B_crit = {critical.fit()[1]:.0f}")
    ax.plot(fine, critical.halving_steps(fine), ":", color="0.4",
            label="half the steps per doubling")
    ax.axvline(b_simple, color="#7570b3", lw=1.5, label=f"B_simple measured by DDP: "
                                                        f"{b_simple:.0f}")
    ax.set_ylim(max(1, critical.best_steps.min() / 2), critical.best_steps.max() * 2)
    ax.set_ylabel(f"steps to expected loss {critical.target:g}")
    ax = axes[1]
    ax.plot(B, critical.best_lrs, "o-", color="0.2", label="best learning rate of the grid")
    ax.plot(B, critical.linear_rule_lrs, ":", color="0.4",
            label="linear rule from the smallest batch")
    ax.axvline(b_simple, color="#7570b3", lw=1.5)
    ax.set_ylim(critical.best_lrs.min() / 1.6, critical.best_lrs.max() * 1.6)
    ax.set_ylabel("learning rate")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(B, [f"{b:g}" for b in B])
        ax.legend(fontsize=LEGEND_SIZE)
    plain_ticks(axes[0].yaxis, [1, 2, 5, 10, 20, 50, 100, 200])
    plain_ticks(axes[1].yaxis, critical.best_lrs)
    axes[1].set_xlabel(f"global batch size ({critical.world_size} ranks)")
    return fig


def noise_scale(result):
    """One noise-scale run (the lab): the expected loss, and the per-step estimates."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.3), constrained_layout=True)
    left.plot([], [], color="0.2")
    _window(left, result.window)
    loss_axes(left, result.noise_floor)
    left.set_xlabel("step")
    left.set_ylabel("expected loss")
    left.legend(fontsize=LEGEND_SIZE)
    for name, color in (("tr(Sigma)", "#d95f02"), ("|G|^2", "#1b9e77")):
        right.plot([], [], ".", color=color, label=f"{name}, DDP")
        right.plot([], [], "-", lw=1, color=color, label=f"{name}, true")
    right.set_yscale("symlog", linthresh=0.1)
    right.set_xlabel("step")
    right.legend(fontsize=LEGEND_SIZE, ncol=2)
    update_noise_scale(fig, result)
    return fig


def update_noise_scale(fig, result) -> bool:
    """Put ``result`` into a figure :func:`noise_scale` drew (any world size, batch or rate
    draws the same artists): a slider move redraws without building a figure."""
    if len(fig.axes) != 2 or len(fig.axes[0].patches) != 1 or len(fig.axes[1].lines) != 4:
        return False
    left, right = fig.axes
    steps, w = np.arange(result.steps), result.window
    left.lines[0].set_data(steps, result.population_losses)
    left.patches[0].remove()  # axvspan gives a Polygon before matplotlib 3.9, a Rectangle after
    _window(left, w)
    for line, values in zip(right.lines, (result.trace, result.exact_trace, result.g2,
                                          result.exact_g2)):
        line.set_data(steps, values)
    for ax in (left, right):
        ax.relim()  # a handful of artists: what a new figure's plot() calls would collect
        ax.autoscale_view()
    right.set_title(f"{result.world_size} ranks x {result.batch_size}: B_simple "
                    f"{result.b_simple:.1f} (true {result.b_simple_exact:.1f})", fontsize=10)
    return True


noise_scale.update = update_noise_scale


def _window(ax, window: slice) -> None:
    """The steps the estimate averages, shaded."""
    ax.axvspan(window.start - 0.5, window.stop - 0.5, color="#7570b3", alpha=0.12, label="window")
