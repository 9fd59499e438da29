"""Figures of what the chapter "The time cost" measures of communication: the all-reduce
against message size, DDP's communication hooks, and the exposed communication against the
bucket count. Each has an ``update`` for a lab's slider
panel (``screen.live_figure``): a move redraws the kept figure in place."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ddplab.screen.style import LEGEND_SIZE, PAGE_WIDTH, figure, rank_color


def allreduce(results, axes=None):
    """Time against size (measured, and the fit T = alpha + S/B) and busbw against the
    memory-copy bandwidth; ``results``: one ``allreduce.AllReduce`` or ``{world size: it}``."""
    results = results if isinstance(results, dict) else {results.world_size: results}
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(PAGE_WIDTH, 3.1), constrained_layout=True)
    time_ax, bw_ax = axes
    for i, (w, r) in enumerate(results.items()):
        color = rank_color(i)
        labels = _allreduce_labels(w, r)
        time_ax.loglog(*_allreduce_times(r), "o", color=color, ms=4, label=labels[0])
        time_ax.loglog(*_allreduce_fit(r), "-", color=color, lw=1, alpha=0.7, label=labels[1])
        bw_ax.semilogx(*_allreduce_busbw(r), "o-", color=color, ms=4, lw=1, label=labels[2])
        bw_ax.axhline(r.copy_bandwidth_bytes_per_s / 1e9, color=color, ls=":", lw=1.2,
                      label=labels[3])
    time_ax.set_xlabel("message size S, bytes", fontsize=9)
    time_ax.set_ylabel("ms per all-reduce (median)", fontsize=9)
    bw_ax.set_xlabel("message size S, bytes", fontsize=9)
    bw_ax.set_ylabel("GB/s", fontsize=9)
    time_ax.legend(fontsize=LEGEND_SIZE, loc="upper left")
    bw_ax.legend(fontsize=LEGEND_SIZE, loc="upper left")
    _allreduce_limits(axes, results)
    return time_ax.figure


def update_allreduce(fig, result) -> bool:
    """Put one ``allreduce.AllReduce`` into a figure :func:`allreduce` drew for one result
    (a slider panel then redraws in place, ``screen.live_figure``): data, legend texts,
    limits. False for a figure of several world sizes."""
    if isinstance(result, dict) or len(fig.axes) != 2:
        return False
    time_ax, bw_ax = fig.axes
    if len(time_ax.lines) != 2 or len(bw_ax.lines) != 2:
        return False
    lines = [*time_ax.lines, *bw_ax.lines]
    data = [_allreduce_times(result), _allreduce_fit(result), _allreduce_busbw(result)]
    for line, xy in zip(lines, data):
        line.set_data(*xy)
    copy = result.copy_bandwidth_bytes_per_s / 1e9
    lines[3].set_ydata([copy, copy])
    labels = _allreduce_labels(result.world_size, result)
    texts = [*time_ax.get_legend().get_texts(), *bw_ax.get_legend().get_texts()]
    for line, text, label in zip(lines, texts, labels):
        line.set_label(label)
        text.set_text(label)
    _allreduce_limits(fig.axes, {result.world_size: result})
    return True


allreduce.update = update_allreduce


def _allreduce_times(r):
    return np.array(r.sizes_bytes), 1e3 * np.array(r.seconds)


def _allreduce_fit(r):
    fine = np.geomspace(r.sizes_bytes[0], r.sizes_bytes[-1], 50)
    return fine, [1e3 * r.fit.seconds(s) for s in fine]


def _allreduce_busbw(r):
    return np.array(r.sizes_bytes), np.array(r.busbw) / 1e9


def _allreduce_labels(world_size: int, r) -> list[str]:
    """The legend's entries for one result: measured, fit, busbw, copy."""
    return [f"{world_size} ranks, measured",
            f"fit: {1e6 * r.alpha_s:.0f} us + S / {r.bandwidth_bytes_per_s / 1e9:.2f} GB/s",
            f"{world_size} ranks, busbw", f"memory copy, one rank ({world_size}-rank run)"]


def _allreduce_limits(axes, results) -> None:
    """Limits from the data (:func:`allreduce` and :func:`update_allreduce` alike)."""
    time_ax, bw_ax = axes
    for ax in axes:
        ax.relim()
        ax.autoscale_view()
    bw_ax.set_ylim(0, 1.35 * max(r.copy_bandwidth_bytes_per_s for r in results.values()) / 1e9)


def compression(results, axes=None):
    """Bytes on the wire, the gradient's relative error and the time, per hook
    (``{hook: compression.Compression}``; a hook whose run is still to come, None in a sweep's
    partial result, has its row and no bar yet)."""
    if axes is None:
        fig, axes = plt.subplots(1, 3, figsize=(PAGE_WIDTH, 2.6), constrained_layout=True)
    names = list(results)
    y = np.arange(len(names))
    for ax in axes:  # one bar per hook and axes, its width set by _compression_bars
        ax.barh(y, np.ones(len(names)), color=[rank_color(i) for i in range(len(names))])
    axes[0].set_xscale("log")
    axes[0].set_xlabel("MiB sent per rank per step", fontsize=8.5)
    axes[1].set_xscale("log")
    axes[1].set_xlabel("relative error of the\naveraged gradient", fontsize=8.5)
    axes[2].set_xlabel("forward + backward, ms\n(median, rank 0)", fontsize=8.5)
    for ax in axes:
        ax.set_yticks(y, names if ax is axes[0] else [""] * len(names), fontsize=9)
        ax.invert_yaxis()
    axes[1].text(1.2e-5, 0, "exact", va="center", fontsize=8)
    _compression_bars(axes, results)
    return axes[0].figure


def update_compression(fig, results) -> bool:
    """Put ``results`` into a figure :func:`compression` drew for the same hooks (a sweep's
    partial result fills it in; a slider panel redraws it in place, ``screen.live_figure``)."""
    axes = fig.axes
    if (len(axes) != 3 or len(axes[0].patches) != len(results)
            or [t.get_text() for t in axes[0].get_yticklabels()] != list(results)):
        return False
    _compression_bars(axes, results)
    return True


compression.update = update_compression


def _compression_bars(axes, results) -> None:
    """What :func:`compression` draws and :func:`update_compression` redraws: each bar's width
    (none for a hook still to run) and each axis' limits, from the hooks done."""
    done = [r for r in results.values() if r is not None]
    columns = (lambda r: r.bytes_sent / 2 ** 20, lambda r: max(r.grad_rel_error, 1e-9),
               lambda r: r.forward_backward_ms)
    for ax, value in zip(axes, columns):
        for bar, result in zip(ax.patches, results.values()):
            bar.set_visible(result is not None)
            bar.set_width(0 if result is None else value(result))
    mib = [r.bytes_sent / 2 ** 20 for r in done] or [1.0]
    axes[0].set_xlim(min(mib) / 3, 3 * max(mib))  # a log axis: room on both sides
    axes[1].set_xlim(1e-5, 2)
    axes[2].set_xlim(0, 1.1 * max([r.forward_backward_ms for r in done] or [1.0]))


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
