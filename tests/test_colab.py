"""What a lab needs in Colab: one repository address everywhere, and Colab's widgets admitted.

The Colab session itself is simulated by ``scripts/colab_sim.py`` (``make colab-sim``, in CI).
"""

import glob
import importlib.util
import os
import re

import nbformat
from packaging.requirements import Requirement

from ddplab.common import home

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ADDRESS = re.compile(r"git\+(https://[^\"'\s]+)")
COLAB_IPYWIDGETS = "7.7.1"  # googlecolab/backend-info pip-freeze.txt, August 2026


def install_cells() -> dict:
    cells = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "labs", "*.ipynb"))):
        nb = nbformat.read(path, as_version=4)
        cells[os.path.basename(path)] = next(c for c in nb.cells if c.cell_type == "code").source
    return cells


def test_labs_and_readme_install_from_the_homes_address():
    url = home.repository()
    found = {name: ADDRESS.findall(cell) for name, cell in install_cells().items()}
    with open(os.path.join(ROOT, "README.md")) as f:
        found["README.md"] = ADDRESS.findall(f.read())
    assert len(found) > 1
    for where, addresses in found.items():
        assert addresses, f"{where} names no git+https:// address to install from"
        assert set(addresses) == {url}, f"{where} installs from {addresses}, not {url}"


def test_every_install_cell_is_the_same_and_runs_only_in_colab():
    cells = install_cells()
    assert len(set(cells.values())) == 1, "the labs' install cells differ"
    assert '"google.colab" in sys.modules' in next(iter(cells.values()))


def test_requirements_admit_the_widgets_colab_serves():
    with open(os.path.join(ROOT, "requirements.txt")) as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    widgets = [Requirement(line) for line in lines if Requirement(line).name == "ipywidgets"]
    assert len(widgets) == 1
    assert widgets[0].specifier.contains(COLAB_IPYWIDGETS), widgets[0]
    assert widgets[0].specifier.contains("8.1.0"), widgets[0]


def test_requirements_admit_colabs_torch_and_no_torch_older_than_the_lowest_run():
    with open(os.path.join(ROOT, "requirements.txt")) as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    torch = next(Requirement(line) for line in lines if Requirement(line).name == "torch")
    assert torch.specifier.contains("2.11.0") and torch.specifier.contains("2.13.0")
    assert not torch.specifier.contains("2.10.0"), "2.10 and older were never run"


def load_colab_sim():
    spec = importlib.util.spec_from_file_location(
        "colab_sim", os.path.join(ROOT, "scripts", "colab_sim.py"))
    colab_sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(colab_sim)
    return colab_sim


def test_the_simulation_runs_the_install_cell_with_the_wheel_for_the_address():
    colab_sim = load_colab_sim()
    cell = next(iter(install_cells().values()))
    run = colab_sim.as_in_colab(cell, "/w/ddplab-0.1.0-py3-none-any.whl")
    assert "file:///w/ddplab-0.1.0-py3-none-any.whl" in run and "git+" not in run
    assert "sys.modules['google.colab']" in run


def test_the_simulated_colab_runs_without_the_callers_pythonpath(monkeypatch):
    """With ``src/`` on PYTHONPATH the venv imported ddplab from the checkout, not the wheel."""
    monkeypatch.setenv("PYTHONPATH", "/somewhere/src")
    monkeypatch.setenv("DDPLAB_PROBE", "kept")
    env = load_colab_sim().colab_env()
    assert "PYTHONPATH" not in env and env["DDPLAB_PROBE"] == "kept"


def test_the_simulations_test_tools_are_pinned_as_in_requirements_dev():
    colab_sim = load_colab_sim()
    pins = [Requirement(pin) for pin in colab_sim.dev_pins(colab_sim.TEST_TOOLS)]
    assert sorted(pin.name for pin in pins) == sorted(colab_sim.TEST_TOOLS)
    assert all(str(pin.specifier).startswith("==") for pin in pins), pins
