"""Slider panels for the labs: a control moves, a real experiment re-runs, the figure redraws.

    from ddplab.screen import widgets
    widgets.explore(averaging.run, plots.gradients, world_size=(1, 8), reduction=["mean", "sum"])

Controls are given like ``ipywidgets.interact`` abbreviations: ``(low, high)`` or ``(low, high,
step)`` is an integer slider, a list is a dropdown (of values, or of ``(label, value)`` pairs),
a bool a checkbox, and a widget is used as it is; ``fixed(value)`` passes a value to every
run without a control (as in ``interact``). Their starting values are the defaults of
``run``'s signature, and the panel computes and draws once at those values straight away, so a
lab runs top to bottom without a click (nbval, the book build) and shows a figure before anyone
touches a control. Sliders report on release (``continuous_update=False``): one drag is one real
run, not dozens queued behind each other.
"""

from __future__ import annotations

import inspect
import time

import ipywidgets
from ipywidgets import fixed

from ddplab.screen.live_figure import LiveFigure
from ddplab.screen.while_running import WhileRunning


def explore(run, plot, **controls) -> ipywidgets.Widget:
    """A panel of ``controls`` for ``run(**values)``; each change redraws ``plot(result)``."""
    defaults = defaults_of(run)
    widgets = {name: _control(name, spec, defaults.get(name)) for name, spec in controls.items()}
    # One image whose PNG is replaced, rather than an output area cleared and refilled: the
    # page swaps one picture in place, and the figure behind it is kept and updated in place
    # where the plot can (live_figure). The status line splits the time between the run and
    # the draw, which is what a slider move costs (benchmarks/RESULTS.md, "Slider latency").
    image = ipywidgets.Image(format="png", layout=ipywidgets.Layout(max_width="100%"))
    figure = LiveFigure(plot)
    status = ipywidgets.HTML()

    def update(_change=None):
        values = {name: w.value for name, w in widgets.items()}
        status.value = "<i>running...</i>"
        start = time.perf_counter()
        try:
            # A long run ticks: where each rank is and, for a run that may hang, a countdown.
            with WhileRunning(status, timeout=timeout_of(values)):
                result = run(**values)
            ran = time.perf_counter()
            image.value = figure.png(result)
        except Exception as exc:  # shown in the panel: the next move must still work
            status.value = f"<b>{type(exc).__name__}</b>: {exc}"
            return
        end = time.perf_counter()
        status.value = (f"real DDP run and drawn in {1e3 * (end - start):.0f} ms (run "
                        f"{1e3 * (ran - start):.0f}, draw {1e3 * (end - ran):.0f})")

    for widget in widgets.values():
        widget.observe(update, names="value")
    update()
    shown = [w for w in widgets.values() if not isinstance(w, fixed)]
    panel = ipywidgets.VBox([ipywidgets.HBox(shown,
                                             layout=ipywidgets.Layout(flex_flow="row wrap")),
                             status, image])
    panel.show = lambda result: setattr(image, "value", figure.png(result))  # explore_sweep
    return panel


def timeout_of(values: dict) -> float | None:
    """A panel's ``timeout`` control (the hang panels have one): seconds, or None."""
    timeout = values.get("timeout")
    number = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
    return float(timeout) if number else None


def defaults_of(run) -> dict:
    """``run``'s parameters that have a default, with it: where a panel's controls start."""
    return {name: p.default for name, p in inspect.signature(run).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _control(name: str, spec, default):
    if isinstance(spec, (ipywidgets.Widget, fixed)):
        return spec
    style = {"description_width": "initial"}
    if isinstance(spec, bool):
        return ipywidgets.Checkbox(value=spec, description=name, style=style)
    if isinstance(spec, tuple) and len(spec) in (2, 3) and all(isinstance(v, int) for v in spec):
        low, high, step = (*spec, 1) if len(spec) == 2 else spec
        value = default if isinstance(default, int) and low <= default <= high else low
        return ipywidgets.IntSlider(value=value, min=low, max=high, step=step, description=name,
                                    continuous_update=False, style=style)
    if isinstance(spec, list) and spec:
        labelled = all(isinstance(o, tuple) and len(o) == 2 for o in spec)
        values = [value for _, value in spec] if labelled else spec
        index = values.index(default) if default in values else 0
        # By index: a value of None would mean "nothing selected" to ipywidgets.
        return ipywidgets.Dropdown(options=spec, index=index, description=name, style=style)
    raise ValueError(f"control {name!r}: expected (low, high[, step]) of ints, a list, a bool, "
                     f"fixed(value) or an ipywidgets widget, got {spec!r}")


def explore_sweep(run, plot, **controls) -> ipywidgets.Widget:
    """:func:`explore` for a sweep: ``run`` also takes ``progress(done, total, label)``, which a
    bar above the panel shows while a change re-runs it (a sweep is several real runs). The bar
    starts again as soon as a control moves; where the sweep also passes ``partial`` (the result
    of the runs done so far, see ``ddplab.common.progress``), the figure fills in with it."""
    bar = ipywidgets.IntProgress(value=0, min=0, max=1, description="progress",
                                 style={"description_width": "initial"})
    label = ipywidgets.HTML()

    panel = None

    def report(done: int, total: int, text: str, partial=None) -> None:
        bar.max = max(total, 1)
        bar.value = min(done, bar.max)
        label.value = f"<small>{done}/{total}: {text}</small>"
        if partial is not None and panel is not None:
            panel.show(partial)

    def run_reporting(**values):
        report(0, bar.max, "starting")  # at once: the page shows the move was taken
        return run(**values, progress=report)

    signature = inspect.signature(run)  # explore reads its defaults from the signature
    run_reporting.__signature__ = signature.replace(
        parameters=[p for p in signature.parameters.values() if p.name != "progress"])
    panel = explore(run_reporting, plot, **controls)
    return ipywidgets.VBox([ipywidgets.HBox([bar, label]), panel])


def choose(label: str = "pitfall", **panels) -> ipywidgets.Widget:
    """A dropdown over ready panels (each made by :func:`explore`, so each has already computed
    and drawn its defaults); choosing one shows it and hides the rest."""
    names = list(panels)
    dropdown = ipywidgets.Dropdown(options=[(name.replace("_", " "), name) for name in names],
                                   description=label, style={"description_width": "initial"})
    box = ipywidgets.VBox([panels[names[0]]])

    def show(_change=None):
        box.children = [panels[dropdown.value]]

    dropdown.observe(show, names="value")
    return ipywidgets.VBox([dropdown, box])
