"""Figures of what a training step costs in the chapter "The time cost", measured: a step's
phases (one bar per run) and samples per second and scaling efficiency against the world
size."""

from __future__ import annotations

import matplotlib.pyplot as plt

from ddplab.screen.phases import phase_bars
from ddplab.screen.style import LEGEND_SIZE, PAGE_WIDTH, placement_note


def step_phases(runs, ax=None):
    """Median step time split into phases, one bar per run (``step_time.StepTime``, or a
    list or tuple of them, such as ``step_time.paired``'s)."""
    runs = list(runs) if isinstance(runs, (list, tuple)) else [runs]
    return phase_bars(runs, [r.label for r in runs], ax)


def scaling(result, model=None, axes=None):
    """Samples per second and scaling efficiency, weak and strong (``scaling.Scaling``);
    ``model`` (``{world size: cost_model.Step}``, optional) adds the model's weak line."""
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(PAGE_WIDTH, 2.9), constrained_layout=True)
    rate_ax, eff_ax = axes
    ws = list(result.weak)
    for kind, color in (("weak", "tab:blue"), ("strong", "tab:orange")):
        runs = getattr(result, kind)
        what = (f"weak: {result.batch_size} per rank" if kind == "weak"
                else f"strong: {result.global_batch_size} in all")
        rate_ax.plot(ws, [runs[w].samples_per_s for w in ws], "o-", color=color, label=what)
        eff_ax.plot(ws, [result.efficiency(kind, w) for w in ws], "o-", color=color, label=what)
    if model:
        mw = sorted(model)
        eff_ax.plot(mw, [model[w].efficiency for w in mw], "--", color="tab:blue", lw=1,
                    label="model, weak, every rank as fast as one alone")
    rate_ax.plot(ws, [w * result.alone.samples_per_s for w in ws], ":", color="0.4",
                 label="ideal (weak)")
    eff_ax.axhline(1, color="0.4", ls=":", lw=1)
    for ax in axes:
        ax.set_xticks(sorted(set(ws) | set(model or ())))
        ax.set_xlabel("ranks (world size)", fontsize=9)
        if result.shared_from:
            ax.axvspan(result.cores + 0.5, max(ws) + 0.3, color="0.92", zorder=0)
    if result.shared_from:
        rate_ax.text(result.cores + 0.6, 0.02, f"ranks share\n{result.cores} cores",
                     transform=rate_ax.get_xaxis_transform(), fontsize=7.5)
    rate_ax.set_ylabel("samples per second", fontsize=9)
    eff_ax.set_ylabel("scaling efficiency", fontsize=9)
    eff_ax.set_ylim(0, 1.1)
    rate_ax.legend(fontsize=LEGEND_SIZE)
    eff_ax.legend(fontsize=LEGEND_SIZE)
    placement_note(rate_ax.figure, result)  # one placement for every world size
    return rate_ax.figure
