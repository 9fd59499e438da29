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

Every run of a panel goes where the process is placed (``ddplab.placed``; a lab sets it once,
for its largest world size, in its first cell), read when the panel is made, and the status
line names it. A rank-count control (:data:`RANK_CONTROLS`) stops at what that placement serves
(one rank per GPU on NCCL), and the panel says why; a run whose ranks come from several
controls (:func:`ranks_of`) and would need more is not started, and the panel says why.

In a kernel, the values one step either side of each slider are run while the reader reads, on
the same placement and within the same limit, and a move there shows the kept run at once
(``screen.ahead``); the panel says so in a line of its own.
"""

from __future__ import annotations

import inspect
import time

import ipywidgets
from ipywidgets import fixed

from ddplab.engine import turns
from ddplab.engine.placement import gpu_count, placement
from ddplab.screen import ahead
from ddplab.screen.live_figure import LiveFigure
from ddplab.screen.while_running import WhileRunning

# Controls whose value is a number of ranks (the glossary's names for them).
RANK_CONTROLS = ("world_size", "largest_world_size")


def explore(run, plot, **controls) -> ipywidgets.Widget:
    """A panel of ``controls`` for ``run(**values)``; each change redraws ``plot(result)``."""
    where, gpus = placement(), gpu_count()
    most = where.most_ranks(gpus)
    widgets = controls_for(run, controls, most)
    cut = [name for name, spec in controls.items() if name in widgets and
           most < largest_value(spec, defaults_of(run).get(name))]
    # One image whose PNG is replaced, rather than an output area cleared and refilled: the
    # page swaps one picture in place, and the figure behind it is kept and updated in place
    # where the plot can (live_figure). The status line splits the time between the run and
    # the draw, which is what a slider move costs (benchmarks/RESULTS.md, "Slider latency").
    image = ipywidgets.Image(format="png", layout=ipywidgets.Layout(max_width="100%"))
    figure = LiveFigure(plot)
    status = ipywidgets.HTML()
    # In a kernel, the values next to each slider are run while the reader reads (a panel
    # whose run may hang on purpose excepted: its point is the wait); see screen.ahead.
    computed = ahead.Panel(ahead.owner(), run, plot, widgets, ahead="timeout" not in widgets,
                           fits=lambda values: ranks_of(run, values) <= most)

    def update(change=None):
        values = {name: w.value for name, w in widgets.items()}
        if ranks_of(run, values) > most:
            status.value = f"<b>not run</b>: {ranks_of(run, values)} ranks; {limit}"
            return
        # Run ahead, or shown before: at once; else run now, with nothing beside it.
        computed.move(values, change, show=show_kept, run=lambda: run_and_draw(values),
                      waiting=lambda: setattr(status, "value", "<i>running... (started "
                                              "ahead, while you read)</i>"))

    def show_kept(entry, where, started):
        image.value = entry.png
        status.value = ahead.shown_text(entry, time.perf_counter() - started, where)
        getattr(run, "shown_kept", lambda: None)()  # explore_sweep: its bar

    def run_and_draw(values):
        status.value = "<i>running...</i>"
        start = time.perf_counter()
        try:
            # A long run ticks: where each rank is and, for a run that may hang, a countdown.
            with WhileRunning(status, timeout=timeout_of(values)):
                result = run(**values)
            ran = time.perf_counter()
            png = figure.png(result)
            image.value = png
        except Exception as exc:  # shown in the panel: the next move must still work
            status.value = f"<b>{type(exc).__name__}</b>: {exc}"
            return None
        end = time.perf_counter()
        status.value = (f"real DDP run and drawn in {1e3 * (end - start):.0f} ms (run "
                        f"{1e3 * (ran - start):.0f}, draw {1e3 * (end - ran):.0f}), {where}")
        return result, png, ran - start, end - ran

    limit = where.limit_note(gpus)
    for widget in widgets.values():
        widget.observe(update, names="value")
    update()
    shown = [w for w in widgets.values() if not isinstance(w, fixed)]
    rows = [ipywidgets.HBox(shown, layout=ipywidgets.Layout(flex_flow="row wrap"))]
    if cut:  # a slider stops short of the lab's range: say why, once, above the status
        rows.append(ipywidgets.HTML(f"<small>{', '.join(cut)} stops at {most}: {limit}"
                                    f"</small>"))
    if computed.ahead:
        rows.append(ipywidgets.HTML(ahead.NOTE))
    panel = ipywidgets.VBox([*rows, status, image])
    panel.show = lambda result: setattr(image, "value", figure.png(result))  # explore_sweep
    panel.computed = computed  # choose: a panel shown is run ahead first
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


def ranks_of(run, values: dict) -> int:
    """How many ranks ``run(**values)`` asks for: its ``world_size`` or ``largest_world_size``
    (the control's value, else the run's default), or what the run's own ``world_size_of``
    says where several of its parameters make the number (``nodes * gpus_per_node``); 1 where
    none of these is there."""
    values = {**defaults_of(run), **values}
    function = getattr(run, "func", run)  # a functools.partial: the function it calls
    if hasattr(function, "world_size_of"):
        return function.world_size_of(**values)
    counts = [values[name] for name in RANK_CONTROLS if isinstance(values.get(name), int)]
    return max(counts, default=1)


def controls_for(run, controls: dict, most: int) -> dict:
    """The widget of each control (see the module's docstring), a rank-count control's values
    stopped at ``most`` (the most ranks the placement serves)."""
    defaults = defaults_of(run)
    return {name: _control(name, spec, defaults.get(name),
                           most if name in RANK_CONTROLS else None)
            for name, spec in controls.items()}


def largest_value(spec, default) -> int:
    """The largest number a control's ``spec`` offers (0 where it offers none)."""
    if isinstance(spec, fixed):
        spec = [spec.value]
    if isinstance(spec, tuple) and all(isinstance(v, int) for v in spec):
        return spec[1]
    if isinstance(spec, list):
        values = [o[1] if isinstance(o, tuple) else o for o in spec]
        return max((v for v in values if isinstance(v, int)), default=0)
    return default if isinstance(default, int) else 0


def _control(name: str, spec, default, most: int | None = None):
    if isinstance(spec, (ipywidgets.Widget, fixed)):
        return spec
    style = {"description_width": "initial"}
    if isinstance(spec, bool):
        return ipywidgets.Checkbox(value=spec, description=name, style=style)
    if isinstance(spec, tuple) and len(spec) in (2, 3) and all(isinstance(v, int) for v in spec):
        low, high, step = (*spec, 1) if len(spec) == 2 else spec
        if most is not None:
            if low > most:
                raise ValueError(f"control {name!r} starts at {low} ranks: {most} at most here")
            high = min(high, most)
        value = default if isinstance(default, int) and low <= default <= high else low
        return ipywidgets.IntSlider(value=value, min=low, max=high, step=step, description=name,
                                    continuous_update=False, style=style)
    if isinstance(spec, list) and spec:
        if most is not None:
            spec = [o for o in spec if (o[1] if isinstance(o, tuple) else o) <= most]
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
        if turns.in_background():  # run ahead (screen.ahead): the bar is the reader's
            return run(**values, progress=None)
        report(0, bar.max, "starting")  # at once: the page shows the move was taken
        return run(**values, progress=report)

    def shown_kept():  # a sweep kept whole (screen.ahead): the bar full
        bar.value = bar.max
        label.value = "<small>every run done</small>"

    run_reporting.shown_kept = shown_kept

    signature = inspect.signature(run)  # explore reads its defaults from the signature
    run_reporting.__signature__ = signature.replace(
        parameters=[p for p in signature.parameters.values() if p.name != "progress"])
    panel = explore(run_reporting, plot, **controls)
    outer = ipywidgets.VBox([ipywidgets.HBox([bar, label]), panel])
    outer.computed = panel.computed  # choose
    return outer


def choose(label: str = "pitfall", **panels) -> ipywidgets.Widget:
    """A dropdown over ready panels (each made by :func:`explore`, so each has already computed
    and drawn its defaults); choosing one shows it and hides the rest."""
    names = list(panels)
    dropdown = ipywidgets.Dropdown(options=[(name.replace("_", " "), name) for name in names],
                                   description=label, style={"description_width": "initial"})
    box = ipywidgets.VBox([panels[names[0]]])

    def show(_change=None):
        box.children = [panels[dropdown.value]]
        ahead.shown(getattr(panels[dropdown.value], "computed", None))  # its values first

    dropdown.observe(show, names="value")
    show()
    return ipywidgets.VBox([dropdown, box])
