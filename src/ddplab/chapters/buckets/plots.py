"""Figures for the chapter "Buckets": bucket diagrams and measured timelines; no computation."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch, Rectangle

from ddplab.screen.phases import phase_bars
from ddplab.screen.style import LEGEND_SIZE, WIDE

BUCKET_COLORS = [c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7]  # no grey
GREY = "0.82"
WIDTH = WIDE  # a timeline needs a little more than the text column (PAGE_WIDTH)
ROW = 0.95  # inches per rank in a timeline


def bucket_color(index: int):
    return BUCKET_COLORS[index % len(BUCKET_COLORS)]


def human(n: int) -> str:
    """Bytes as B, KiB or MiB."""
    for unit, size in (("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


# ---------------------------------------------------------------- bucket diagrams


def diagram(ax, rows, sizes: dict, labels):
    """One row per layout: parameters in launch order, boxed by bucket, bucket k in colour k.

    ``rows`` holds layouts (lists of buckets, each a list of parameter names), ``sizes`` maps a
    parameter name to its bytes.
    """
    width = max(sum(len(b) for b in layout) + 0.25 * len(layout) for layout in rows)
    small = 8.5 if width <= 8 else 7
    for r, (layout, label) in enumerate(zip(rows, labels)):
        y, x = -1.7 * r, 0.0
        ax.text(-0.15, y + 0.4, label, ha="right", va="center", fontsize=9)
        for k, params in enumerate(layout):
            color = bucket_color(k)
            ax.add_patch(Rectangle((x - 0.06, y - 0.08), len(params) + 0.12, 0.96, fill=False,
                                   ec=color, lw=2))
            total = sum(sizes[p] for p in params)
            label = f"bucket {k}" + ("\n" if len(params) == 1 else ": ") + human(total)
            ax.text(x + len(params) / 2, y - 0.16, label, ha="center", va="top",
                    fontsize=small, color=color, fontweight="bold", linespacing=1.0)
            for name in params:
                ax.add_patch(Rectangle((x + 0.05, y), 0.9, 0.8, color=color, alpha=0.22))
                ax.text(x + 0.5, y + 0.4, f"{name}\n{human(sizes[name])}", ha="center",
                        va="center", fontsize=small)
                x += 1
            x += 0.25
    ax.set_xlim(-0.1, width)
    ax.set_ylim(-1.7 * (len(rows) - 1) - 0.8, 0.95)
    ax.set_axis_off()


def _groups(result) -> list[list]:
    """[first iteration, last iteration, layout] for runs of equal consecutive layouts."""
    groups = []
    for i in range(len(result.layouts)):
        layout = result.params(i)
        if groups and groups[-1][2] == layout:
            groups[-1][1] = i
        else:
            groups.append([i, i, layout])
    return groups


def layouts(result, title: str | None = None, ax=None):
    """The buckets DDP launched on each iteration (equal consecutive layouts merged)."""
    groups = _groups(result)
    labels = [f"iteration {a}" if a == b else f"iterations {a}-{b}" for a, b, _ in groups]
    if ax is None:
        _, ax = plt.subplots(figsize=(WIDTH, 0.55 + 0.85 * len(groups)),
                             constrained_layout=True)
    diagram(ax, [g[2] for g in groups], dict(zip(result.param_names, result.param_bytes)),
            labels)
    ax.set_title(title or _setting(result), fontsize=10, loc="left")
    return ax.figure


def layouts_grid(results, titles):
    """Small multiples of :func:`layouts`, one panel per setting."""
    heights = [0.55 + 0.85 * len(_groups(r)) for r in results]
    fig, axes = plt.subplots(len(results), 1, figsize=(WIDTH, sum(heights)),
                             gridspec_kw={"height_ratios": heights}, constrained_layout=True)
    for ax, result, title in zip(np.atleast_1d(axes), results, titles):
        layouts(result, title, ax=ax)
    return fig


def _setting(result) -> str:
    cap = _cap(result.bucket_cap_mb) + ("" if result.bucket_cap_mb is None else " MiB")
    flags = [f for f in ("find_unused_parameters", "static_graph") if getattr(result, f)]
    return f"bucket_cap_mb: {cap}" + "".join(f", {f}=True" for f in flags)


# ---------------------------------------------------------------- timelines


def timeline(result, ax=None, legend: bool = True):
    """Each rank's forward and backward (coloured by the bucket a gradient goes to) above its
    all-reduces, for the step of median time; ms from the step's start on rank 0."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(WIDTH, 0.8 + ROW * result.world_size),
                               constrained_layout=True)
    owner = {}  # parameter -> colour index of its all-reduce
    for k, call in enumerate(result.all_reduces):
        owner.update({p: k for p in call["params"]})
    for rank in range(result.world_size):
        e, y = result.events(rank), -1.5 * rank
        ax.broken_barh([(e["start"], e["forward_end"] - e["start"])], (y, 0.6), color=GREY)
        t = e["forward_end"]
        for name, ready in e["ready"]:
            color = bucket_color(owner[name]) if name in owner else GREY
            ax.broken_barh([(t, ready - t)], (y, 0.6), color=color, alpha=0.75)
            t = max(t, ready)
        ax.broken_barh([(t, e["backward_end"] - t)], (y, 0.6), fc="white", ec="0.5",
                       hatch="////", lw=0.5)
        ax.broken_barh([(e["backward_end"], e["step_end"] - e["backward_end"])], (y, 0.6),
                       color="0.55")
        for k, call in enumerate(e["comm"]):
            if result.mode == "naive":  # a blocking call: this rank computes nothing meanwhile
                ax.broken_barh([(call["start"], call["end"] - call["start"])], (y, 0.6),
                               fc="white", ec="0.5", hatch="////", lw=0.5)
            lane = 0.3 * (k % 2)
            ax.broken_barh([(call["start"], call["end"] - call["start"])],
                           (y - 0.65 + lane, 0.28), color=bucket_color(k))
        ax.text(-0.01, y + 0.3, f"rank {rank} compute", transform=ax.get_yaxis_transform(),
                ha="right", va="center", fontsize=9)
        ax.text(-0.01, y - 0.36, "all-reduce", transform=ax.get_yaxis_transform(),
                ha="right", va="center", fontsize=9)
    ax.set_yticks([])
    ax.set_ylim(-1.5 * (result.world_size - 1) - 0.8, 0.75)
    ax.set_xlabel("ms from the start of the step", fontsize=9)
    ax.set_title(_timeline_title(result), fontsize=9.5, loc="left")
    if legend:
        ax.legend(handles=[Patch(color=GREY, label="forward"),
                           Patch(color=bucket_color(0), alpha=0.75,
                                 label="backward, coloured by bucket"),
                           Patch(fc="white", ec="0.5", hatch="////",
                                 label="waits for all-reduces"),
                           Patch(color="0.55", label="optimizer step")],
                  fontsize=LEGEND_SIZE, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.25 /
                  max(1, result.world_size / 2)), frameon=False)
    return ax.figure


def _timeline_title(result) -> str:
    what = {"naive": "naive: one all-reduce per parameter", "local": "no communication"}.get(
        result.mode, f"DDP, bucket_cap_mb {_cap(result.bucket_cap_mb)}")
    return (f"{what}; world size {result.world_size}; step {1e3 * result.median('step'):.1f} ms "
            f"(median), {len(result.all_reduces)} all-reduce calls")


def _cap(bucket_cap_mb) -> str:
    return "default" if bucket_cap_mb is None else f"{bucket_cap_mb:g}"


def overview(result):
    """The buckets of the shown step above its timeline: what the lab redraws."""
    fig = plt.figure(figsize=(WIDTH, 2.6 + ROW * result.world_size), constrained_layout=True)
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.3, 1.0 + ROW * result.world_size])
    ax = top.subplots()
    sizes = dict(zip(result.param_names, result.param_bytes))
    rows = [[c["params"] for c in result.all_reduces]] if result.all_reduces else [
        [result.param_names[::-1]]]
    diagram(ax, rows, sizes, ["launch order"])
    timeline(result, ax=bottom.subplots())
    return fig


def timelines(results):
    """Small multiples of :func:`timeline` on a shared time axis."""
    fig, axes = plt.subplots(len(results), 1, sharex=True, constrained_layout=True,
                             figsize=(WIDTH, sum(0.8 + ROW * r.world_size for r in results)))
    for i, (ax, result) in enumerate(zip(np.atleast_1d(axes), results)):
        timeline(result, ax=ax, legend=(i == len(results) - 1))
        if i < len(results) - 1:
            ax.set_xlabel("")
    return fig


def step_times(results, labels):
    """The run's step split into the phases ``Timeline.phases_ms`` gives."""
    return phase_bars(results, labels)
