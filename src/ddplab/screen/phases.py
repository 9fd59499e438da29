"""One picture of a training step's phases, for every chapter that times steps: one bar per
run, split into what ``result.phases_ms()`` gives (forward, backward computing, waiting for the
all-reduces, the optimizer step), which add up to the run's step, written beside it. The step
and its phases are ``ddplab.common.timed_step``'s (the slowest rank's step at the median
iteration); this module only draws them."""

from __future__ import annotations

from ddplab.screen.style import LEGEND_SIZE, PAGE_WIDTH, figure

STYLE = {  # phase -> (legend label, bar style)
    "forward": ("forward", dict(color="0.78")),
    "backward": ("backward, computing", dict(color="tab:blue", alpha=0.75)),
    "waiting": ("waiting for the all-reduces", dict(fc="white", ec="0.4", hatch="////", lw=0.5)),
    "optimizer": ("optimizer step", dict(color="0.45")),
}


def phase_bars(results, labels, ax=None, xlabel="ms (the median step, its slowest rank)"):
    """One horizontal bar per result, stacked from ``result.phases_ms()``, labelled ``labels``
    and annotated with ``result.step_ms``."""
    fig, ax = figure(ax, (PAGE_WIDTH, 0.9 + 0.42 * len(results)))
    for i, result in enumerate(results):
        left = 0.0
        for phase, width in result.phases_ms().items():
            label, style = STYLE[phase]
            ax.barh(i, width, left=left, label=label if i == 0 else None, height=0.6, **style)
            left += width
        ax.text(left + 0.01 * max(r.step_ms for r in results), i,
                f"{result.step_ms:.1f} ms step", va="center", fontsize=8)
    ax.set_yticks(range(len(results)), labels, fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_xlim(0, 1.2 * max(r.step_ms for r in results))
    ax.legend(fontsize=LEGEND_SIZE, ncol=2, loc="lower center", bbox_to_anchor=(0.5, 1.0),
              frameon=False)
    return fig
