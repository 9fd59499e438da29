"""Figures of the cost model in the chapter "The time cost": its step split into its terms
beside the measured step (the calibration), its prediction for a cluster (with an ``update``
for the lab's slider panel, ``screen.live_figure``), and its efficiency against the GPU
count. The model's curve is the model's function, called here; nothing else is computed."""

from __future__ import annotations

import matplotlib.pyplot as plt

from ddplab.screen.style import LEGEND_SIZE, PAGE_WIDTH, figure, log2_x, rank_color

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
    # beside the axes, not on them: the curves fill the lower left
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
