"""No lab's slider can ask for more ranks than its placement serves, on 1, 2, 4 or 8 GPUs.

Each lab says, in its first cell, the largest world size its runs ask for
(``ddplab.placed(largest_world_size=N)``), and "auto" resolves to one placement that serves all
of it. The GPU count is given by hand (``placement.resolve(gpus=...)``), so this holds on a
machine without a GPU. The panels are read from the labs themselves: their import cells and
their ``widgets.explore`` cells run here with ``widgets`` standing in for the screen's module,
recording each panel's run and controls instead of running it; the controls are then made by
the screen's own ``controls_for``, as ``explore`` makes them."""

import ast
import glob
import inspect
import itertools
import os
import types

import ipywidgets
import nbformat
import pytest

from ddplab.engine.placement import MAX_WORLD_SIZE, Placement, resolve
from ddplab.screen import widgets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LABS = sorted(glob.glob(os.path.join(ROOT, "labs", "*.ipynb")))
GPU_COUNTS = (1, 2, 4, 8)


def code_cells(path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def is_placed(node) -> bool:
    call = node.value if isinstance(node, ast.Expr) else None
    return isinstance(call, ast.Call) and ast.unparse(call.func) == "ddplab.placed"


def declared_range(path) -> int:
    """N of the lab's ``ddplab.placed(largest_world_size=N)`` (exactly one)."""
    found = [node.value for source in code_cells(path) for node in ast.parse(source).body
             if is_placed(node)]
    assert len(found) == 1, f"{path}: {len(found)} ddplab.placed(...) calls"
    (keyword,) = [k for k in found[0].keywords if k.arg == "largest_world_size"]
    return ast.literal_eval(keyword.value)


def panel_statement(node) -> bool:
    """An import, a constant, or a call of ``widgets`` (a panel): what sets panels up."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    value = getattr(node, "value", None)
    if isinstance(node, (ast.Assign, ast.Expr)) and isinstance(value, ast.Call):
        return ast.unparse(value.func).startswith("widgets.")
    if isinstance(node, ast.Assign):
        try:
            ast.literal_eval(value)
            return True
        except ValueError:
            return False
    return False


def panels(path) -> list[tuple]:
    """``(run, controls)`` of every ``widgets.explore``/``explore_sweep`` panel of the lab."""
    recorded = []
    stand_in = types.SimpleNamespace(
        explore=lambda run, plot, **controls: recorded.append((run, controls)),
        explore_sweep=lambda run, plot, **controls: recorded.append((run, controls)),
        fixed=ipywidgets.fixed, choose=lambda *a, **k: None)
    namespace = {}
    for source in code_cells(path):
        body = [n for n in ast.parse(source).body if not is_placed(n)]
        if "google.colab" in source or not body or not all(map(panel_statement, body)):
            continue
        exec(compile(ast.Module(body, []), path, "exec"), namespace)  # noqa: S102
        namespace["widgets"] = stand_in  # after the import cell has bound the real one
    return recorded


def choices(widget) -> list:
    """Every value a control can take."""
    if isinstance(widget, ipywidgets.IntSlider):
        return list(range(widget.min, widget.max + 1, widget.step))
    if isinstance(widget, ipywidgets.Dropdown):
        return [o[1] if isinstance(o, tuple) else o for o in widget.options]
    if isinstance(widget, ipywidgets.Checkbox):
        return [False, True]
    return [widget.value]  # fixed(value), and any other widget as it is


def most_ranks_asked(run, controls, most: int) -> int:
    """The most ranks any setting of the panel's controls asks for, its rank-count controls
    stopped at ``most`` as ``explore`` stops them."""
    made = widgets.controls_for(run, controls, most)
    size_of = getattr(getattr(run, "func", run), "world_size_of", None)  # a partial's function
    counted = {*widgets.RANK_CONTROLS, *(inspect.signature(size_of).parameters if size_of else ())}
    names = [n for n in made if n in counted]
    return max(widgets.ranks_of(run, dict(zip(names, values)))
               for values in itertools.product(*(choices(made[n]) for n in names)))


LAB_PANELS = [(os.path.basename(path), declared_range(path), panels(path)) for path in LABS]


def test_every_lab_has_panels_read_from_it():
    assert len(LAB_PANELS) == 9
    explores = sum(open(path).read().count("widgets.explore") for path in LABS)
    assert sum(len(found) for _, _, found in LAB_PANELS) == explores > 30
    assert all(found for name, _, found in LAB_PANELS if not name.startswith("00"))


@pytest.mark.parametrize("name, largest, found", LAB_PANELS, ids=[n for n, _, _ in LAB_PANELS])
def test_a_lab_s_range_covers_its_panels(name, largest, found):
    """What a lab says is its largest world size is at least what its panels ask for, so
    "auto" never cuts a slider short (a run beyond it would be refused on any machine)."""
    for run, controls in found:
        asked = most_ranks_asked(run, controls, MAX_WORLD_SIZE)
        assert asked <= largest, f"{name}: {run} asks up to {asked} ranks, the lab says {largest}"


@pytest.mark.parametrize("gpus", GPU_COUNTS)
@pytest.mark.parametrize("name, largest, found", LAB_PANELS, ids=[n for n, _, _ in LAB_PANELS])
def test_no_slider_asks_for_what_the_lab_s_placement_cannot_serve(name, largest, found, gpus):
    where = resolve(gpus=gpus, ranks=largest, environ={})
    assert where == (Placement("nccl", "cuda") if gpus >= largest else Placement("gloo", "cpu"))
    for run, controls in found:
        assert most_ranks_asked(run, controls, where.most_ranks(gpus)) <= where.most_ranks(gpus)


@pytest.mark.parametrize("gpus", GPU_COUNTS)
def test_nccl_asked_for_stops_the_world_size_sliders_at_the_gpus(gpus):
    """``DDPLAB_BACKEND=nccl`` on a lab that goes further than the GPUs: its world-size sliders
    stop at one rank per GPU (and the panel says why, ``Placement.limit_note``)."""
    where = resolve(gpus=gpus, ranks=8, environ={"DDPLAB_BACKEND": "nccl"})
    assert where == Placement("nccl", "cuda")
    _, _, found = next(lab for lab in LAB_PANELS if lab[0] == "01_averaging.ipynb")
    run, controls = found[0]
    slider = widgets.controls_for(run, controls, where.most_ranks(gpus))["world_size"]
    assert (slider.min, slider.max) == (1, gpus) and 1 <= slider.value <= gpus
    assert where.limit_note(gpus).startswith(f"{gpus} GPU")
