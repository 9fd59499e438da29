"""Figures for the chapter "The time cost": results in, matplotlib figures out; no computation
beyond reading a result's fields (a model's curve is the model's function, called here). The
communication figures (the all-reduce, the hooks) are in ``plots.communication``, here too."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ddplab.chapters.time_cost.plots.communication import (  # noqa: F401 (the chapter's plots)
    allreduce,
    compression,
    update_allreduce,
    update_compression,
)
from ddplab.screen.phases import phase_bars
from ddplab.screen.style import LEGEND_SIZE, PAGE_WIDTH, figure, log2_x, placement_note, rank_color

MODEL_STYLE = {  # a model's term -> (label, bar style)
    "compute_s": ("forward and backward", dict(color="tab:blue", alpha=0.75)),
    "copy_s": ("DDP's gradient copies", dict(color="tab:olive", alpha=0.8)),
    "exposed_s": ("exposed all-reduce", dict(fc="white", ec="0.4", hatch="////", lw=0.5)),
    "optimizer_s": ("optimizer step", dict(color="0.45")),
}


def _stacked(ax, y, parts, labelled: bool):
    """One horizontal bar of ``(width, label, style)`` parts; returns its right end."""
    left = 0.0
    for width, label, style in parts:
        ax.barh(y, width, left=left, label=label if labelled else None, height=0.6, **style)
        left += width
    return left


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


def bucket_tradeoff(sweep, model, ax=None):
    """Measured exposed communication against the bucket count (``bucket_size.BucketSweep``),
    beside the model (``bucket_size.Tradeoff``)."""
    fig, ax = figure(ax, (PAGE_WIDTH, 3.0))
    ax.semilogx(sweep.buckets, [1e3 * e for e in sweep.exposed_s], "o-", color="tab:blue",
                base=2, label="measured: waiting after the last gradient (median)")
    ax.plot(model.buckets, [1e3 * e for e in model.exposed_s], "--", color="tab:red", lw=1.2,
            label=f"model S/(n_b w) + n_b o: w {model.bandwidth / 1e9:.2f} GB/s, "
                  f"o {1e6 * model.overhead_s:.0f} us")
    ax.axvline(model.best, color="tab:red", lw=0.8, ls=":")
    ax.text(model.best, 0.97, f" model's best: {model.best:.1f}", color="tab:red",
            fontsize=8, transform=ax.get_xaxis_transform(), va="top")
    ax.set_xticks(sweep.buckets, [str(n) for n in sweep.buckets])
    ax.set_xlabel("buckets per step (from bucket_cap_mb)", fontsize=9)
    ax.set_ylabel("exposed communication, ms", fontsize=9)
    ax.set_ylim(0, None)
    ax.legend(fontsize=LEGEND_SIZE, loc="upper center")
    return fig


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


def calibration(check, ax=None):
    """Measured step times beside the model's, split into its terms
    (``calibration.Calibration``)."""
    ws = list(check.measured_s)
    fig, ax = figure(ax, (PAGE_WIDTH, 0.9 + 0.8 * len(ws)))
    for i, w in enumerate(ws):
        step = check.predict(w)
        parts = [(1e3 * getattr(step, k), *MODEL_STYLE[k]) for k in MODEL_STYLE]
        end = _stacked(ax, 2 * i + 0.35, parts, i == 0)
        ax.text(end + 1, 2 * i + 0.35, f"model {1e3 * step.step_s:.0f} ms", va="center",
                fontsize=8)
        ax.barh(2 * i - 0.35, 1e3 * check.measured_s[w], height=0.6, color="tab:green",
                alpha=0.7, label="measured DDP step (median)" if i == 0 else None)
        ax.text(1e3 * check.measured_s[w] + 1, 2 * i - 0.35,
                f"measured {1e3 * check.measured_s[w]:.0f} ms", va="center", fontsize=8)
    ax.set_yticks([2 * i for i in range(len(ws))], [f"{w} rank{'s' * (w > 1)}" for w in ws])
    ax.invert_yaxis()
    ax.set_xlabel("ms per step", fontsize=9)
    ax.set_xlim(0, 1.3 * max(max(check.measured_s.values()),
                             max(check.predict(w).step_s for w in ws)) * 1e3)
    ax.legend(fontsize=LEGEND_SIZE, ncol=3, loc="lower center", bbox_to_anchor=(0.5, 1.0),
              frameon=False)
    return fig


def cluster(prediction, axes=None):
    """A model's step (``cluster_prediction.ClusterPrediction``): its terms, and its weak scaling
    efficiency against the node count for every inter-node link."""
    if axes is None:
        fig, axes = plt.subplots(2, 1, figsize=(PAGE_WIDTH, 4.2), constrained_layout=True,
                                 height_ratios=[1, 3.2])
    bar_ax, eff_ax = axes
    step = prediction.step
    parts = [(1e3 * getattr(step, k), *MODEL_STYLE[k]) for k in MODEL_STYLE]
    end = _stacked(bar_ax, 0, parts, True)
    bar_ax.text(end, 0, "", va="center", fontsize=8)
    bar_ax.legend(fontsize=LEGEND_SIZE, ncol=2, loc="lower center", bbox_to_anchor=(0.5, 1.0),
                  frameon=False)
    for i, (name, curve) in enumerate(prediction.curves.items()):
        chosen = name == prediction.inter
        eff_ax.plot(list(curve), list(curve.values()), "o-" if chosen else ".-", ms=4,
                    lw=2.2 if chosen else 1, color=rank_color(i), label=name)
    eff_ax.set_ylim(0, 1.05)
    eff_ax.set_ylabel("model: weak scaling efficiency", fontsize=8.5)
    # beside the axes, not on them: the curves fill the lower left (Fig 5.9, issue 40)
    eff_ax.legend(fontsize=LEGEND_SIZE, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  title="between nodes", title_fontsize=LEGEND_SIZE, frameon=False)
    _cluster_labels(bar_ax, eff_ax, prediction, end)
    return bar_ax.figure


def update_cluster(fig, prediction) -> bool:
    """Put ``prediction`` into a figure :func:`cluster` drew, if it shows the same links with
    the same one chosen (a slider panel then redraws without building a figure,
    ``screen.live_figure``); the artists are the ones :func:`cluster` made, in its order."""
    if len(fig.axes) != 2:
        return False
    bar_ax, eff_ax = fig.axes
    chosen = [line.get_label() for line in eff_ax.lines if line.get_linewidth() == 2.2]
    if ([line.get_label() for line in eff_ax.lines] != list(prediction.curves)
            or chosen != [prediction.inter] or len(bar_ax.patches) != len(MODEL_STYLE)
            or len(bar_ax.texts) != 1):
        return False
    step, left = prediction.step, 0.0
    for bar, key in zip(bar_ax.patches, MODEL_STYLE):
        bar.set_x(left)
        bar.set_width(1e3 * getattr(step, key))
        left += 1e3 * getattr(step, key)
    for line, curve in zip(eff_ax.lines, prediction.curves.values()):
        line.set_data(list(curve), list(curve.values()))
    eff_ax.relim()
    eff_ax.autoscale_view(scaley=False)
    _cluster_labels(bar_ax, eff_ax, prediction, left)
    return True


cluster.update = update_cluster


def _cluster_labels(bar_ax, eff_ax, prediction, end: float) -> None:
    """What :func:`cluster` writes and :func:`update_cluster` rewrites: the step's total at
    the bar's ``end``, the ticks and the labels."""
    step = prediction.step
    bar_ax.set_xlim(0, 1.3 * end)
    bar_ax.texts[0].set_position((end, 0))
    bar_ax.texts[0].set_text(f" {1e3 * step.step_s:.0f} ms, efficiency {step.efficiency:.0%}")
    bar_ax.set_yticks([0], [f"{prediction.nodes} x {prediction.gpus_per_node} GPUs"],
                      fontsize=8)
    bar_ax.set_xlabel(f"model: ms per step ({prediction.inter})", fontsize=8.5)
    log2_x(eff_ax, sorted({n for curve in prediction.curves.values() for n in curve}))
    eff_ax.set_xlabel(f"nodes of {prediction.gpus_per_node} GPUs", fontsize=9)
    eff_ax.set_title(prediction.title, fontsize=8, loc="left")


def predicted_scaling(curves: dict, title: str, ax=None):
    """The model's efficiency against the GPU count, one line per kind of scaling
    (``{label: {gpus: efficiency}}``, from ``cluster_prediction.scaling_curves``)."""
    fig, ax = figure(ax, (PAGE_WIDTH, 2.8))
    for i, (label, curve) in enumerate(curves.items()):
        ax.plot(list(curve), list(curve.values()), "o-", ms=3, color=rank_color(i), label=label)
    log2_x(ax, sorted({n for curve in curves.values() for n in curve}))
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("GPUs", fontsize=9)
    ax.set_ylabel("model: scaling efficiency", fontsize=9)
    ax.set_title(title, fontsize=8.5, loc="left")
    ax.legend(fontsize=LEGEND_SIZE)
    return fig
