"""Every exercise: found by its module (``NAME`` and ``LAB``), its answer passes (also written in
a cell), its lab hides that answer, the README lists it in the labs' order, and its own tests
(the mistakes readers make) live in ``tests/test_exercises_<module>.py``."""

import inspect
import pathlib
import re

import nbformat
import pytest

from ddplab import exercises
from ddplab.__main__ import main
from ddplab.exercises import prediction
from exercise_cells import cell


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_each_answer_passes(name):
    verdict = exercises.check(name, exercises.EXERCISES[name].answer)
    assert verdict.passed, verdict.message
    assert "agree with" in verdict.message


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_an_answer_written_in_a_cell_passes_too(name):
    module = exercises.EXERCISES[name]
    source = inspect.getsource(module.answer)
    prelude = "import math\nimport torch.nn.functional as F\n"
    verdict = exercises.check(name, cell(prelude + source, module.FUNCTION))
    assert verdict.passed, verdict.message


def test_a_file_without_the_named_function_names_it(tmp_path, capsys):
    other = tmp_path / "other.py"
    other.write_text("def average_gradient(model):\n    pass\n")
    assert main(["exercise", "average-gradients", "--solution", str(other)]) == 2
    err = capsys.readouterr().err
    assert "defines no 'average_gradients' (it defines: average_gradient)" in err


def test_a_prediction_is_compared_with_the_run():
    guess = prediction.ask("How many?", default=2)
    assert prediction.reveal(guess, 3, "rank 3 sees") == \
        "rank 3 sees: 3. You predicted 2: not this time."
    guess.box.value = 3
    assert prediction.reveal(guess, 3.0, "rank 3 sees").endswith("3: right.")


ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_exercise_module_is_found_in_the_labs_order_with_its_own_tests():
    modules = sorted(p.stem for p in (ROOT / "src" / "ddplab" / "exercises").glob("*.py")
                     if re.search(r"^NAME(, LAB)? = ", p.read_text(), re.M))
    assert len(modules) == len(exercises.EXERCISES) >= 9
    assert sorted(m.__name__.rsplit(".", 1)[1] for m in exercises.EXERCISES.values()) == modules
    labs = [m.LAB for m in exercises.EXERCISES.values()]
    assert labs == sorted(labs) and len(set(labs)) == len(labs)  # one per lab, in order
    for module in modules:
        assert (ROOT / "tests" / f"test_exercises_{module}.py").exists(), module


def test_the_readme_lists_every_exercise_with_its_lab_in_the_labs_order():
    readme = (ROOT / "README.md").read_text()
    listed = re.findall(r"`([a-z-]+)`\s+\((?:lab )?(\d+)\)", readme)
    assert listed == [(name, str(int(pathlib.Path(m.LAB).name[:2])))
                      for name, m in exercises.EXERCISES.items()]


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_each_labs_hidden_answer_is_the_packages(name):
    lab = exercises.EXERCISES[name].LAB
    hidden = [c.source for c in nbformat.read(ROOT / lab, as_version=4).cells
              if c.metadata.get("jupyter", {}).get("source_hidden")]
    answer = inspect.getsource(exercises.EXERCISES[name].answer)
    assert any(answer in source for source in hidden), f"{lab}: no hidden cell holds the answer"
