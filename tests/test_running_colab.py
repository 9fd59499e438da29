"""The running page's Colab section: its times come from the Colab simulation's record, which
has every field the page prints, and its lines are the labs' own."""

import copy
import importlib.util
import json
import re
from pathlib import Path

import nbformat
import pytest

from ddplab.chapters.running import colab

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "labs" / "01_averaging.ipynb"


def section() -> str:
    """book/running.md from ``(running-colab)=`` to the next section."""
    text = (ROOT / "book" / "running.md").read_text()
    start = text.index("(running-colab)=")
    return text[start:text.index("\n## ", text.index("## ", start) + 3)]


def fenced(text: str, kind: str) -> list[str]:
    return re.findall(rf"^```{re.escape(kind)}\n(.*?)^```$", text, re.S | re.M)


SAMPLE = {"schema_version": 1, "measured_by": "scripts/colab_sim.py --record",
          "machine": {"cores": 7, "gpus": 0, "load_average": 1.26, "python": "3.99.1",
                      "torch": "9.8.7+cpu", "ipywidgets": "7.7.1", "date": "2031-02-03"},
          "lab": "labs/01_averaging.ipynb", "install_cell_s": 4.56, "first_result_s": 12.34,
          "first_result_cells": 3,
          "sliders": [{"slider": "world_size", "moves_ms": [111.0, 333.0, 222.0],
                       "run_ms": [90, 300, 200], "draw_ms": [21, 33, 22]},
                      {"slider": "batch_size", "moves_ms": [44.0, 55.0],
                       "run_ms": [30, 40], "draw_ms": [14, 15]}]}


def test_the_record_in_the_repository_has_every_field_and_names_its_machine():
    timing = colab.load()
    machine = timing.machine
    assert isinstance(machine["cores"], int) and machine["cores"] >= 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", machine["date"])
    assert timing.data["first_result_s"] > 0 and timing.data["install_cell_s"] > 0
    assert all(ms > 0 for s in timing.data["sliders"] for ms in s["moves_ms"])
    text = timing.describe()
    assert f"{machine['cores']}-core CPU machine" in text and machine["date"] in text
    assert "Colab simulation" in text
    if machine["gpus"] == 0:  # a CPU machine's times are never presented as a GPU's
        assert "no GPU" in text


def test_the_page_prints_the_records_numbers(tmp_path):
    path = tmp_path / "record.json"
    path.write_text(json.dumps(SAMPLE))
    text = colab.load(path).describe()
    for printed in ("Recorded 2031-02-03 in the Colab simulation",
                    "7-core CPU machine with no GPU (load average 1.3", "Python 3.99.1",
                    "torch 9.8.7+cpu", "4.6 s", "12.3 s", "next 3 cells",
                    "222 ms  median of 3 moves", "slowest 333 ms", "50 ms  median of 2"):
        assert printed in text, printed
    assert max(len(line) for line in text.splitlines()) <= 100


@pytest.mark.parametrize("drop", ["first_result_s", "machine.date", "machine.load_average",
                                  "sliders.0.moves_ms"])
def test_a_record_without_a_field_is_refused_naming_it(tmp_path, drop):
    data = copy.deepcopy(SAMPLE)
    *parents, last = drop.split(".")
    where = data
    for key in parents:
        where = where[int(key)] if key.isdigit() else where[key]
    del where[last]
    path = tmp_path / "record.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=re.escape(last)):
        colab.load(path)


def test_the_simulation_writes_what_the_page_reads():
    spec = importlib.util.spec_from_file_location("colab_sim", ROOT / "scripts" / "colab_sim.py")
    colab_sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(colab_sim)
    timing = {key: SAMPLE[key] for key in ("first_result_s", "first_result_cells", "sliders")}
    timing["load_average"] = 0.5
    versions = {"gpus": 0, "python": "3.13.0", "torch": "2.11.0", "ipywidgets": "7.7.1"}
    written = colab_sim.record(str(LAB), versions, 4.5, timing)
    assert colab.validate(written)["lab"] == "labs/01_averaging.ipynb"


def test_the_section_prints_no_time_of_its_own_and_reads_the_record():
    text = section()
    prose = re.sub(r"^```.*?^```$", "", text, flags=re.S | re.M)
    assert not re.findall(r"\d+(?:\.\d+)?\s*(?:ms|s|seconds?|minutes?)\b", prose)
    cells = fenced(text, "{code-cell} ipython3")
    assert any("colab.load()" in cell and ".describe()" in cell for cell in cells)
    assert "images/lab01-first-panel.png" in text
    assert (ROOT / "book" / "images" / "lab01-first-panel.png").is_file()


def test_the_section_shows_the_labs_first_cells_and_its_placement_line_changed():
    cells = [c.source for c in nbformat.read(LAB, as_version=4).cells if c.cell_type == "code"]
    shown = [block.rstrip("\n") for block in fenced(section(), "python")]
    assert shown[:2] == cells[:2]
    assert shown[2] == cells[1].splitlines()[-1].split("  #")[0].replace(
        "ddplab.placed(", 'ddplab.placed(backend="gloo", device="cuda", ')
    assert "largest_world_size=16" in cells[1]  # the page's on_one_gpu(largest_world_size=16)


def test_on_one_gpu_the_lab_runs_on_the_cpu_unless_told_and_nccl_is_refused():
    one = colab.on_one_gpu(16)
    assert (one.as_is.backend, one.as_is.device) == ("gloo", "cpu")
    assert (one.on_the_gpu.backend, one.on_the_gpu.device) == ("gloo", "cuda")
    assert "needs one GPU per rank" in one.nccl_refused
    assert max(len(line) for line in one.describe().splitlines()) <= 100
