"""Every exercise: found by its record (``EXERCISE``), its answer passes (also written in a cell),
its lab hides that answer, the README lists it in the labs' order, and its own tests (the
mistakes readers make) live in ``tests/test_exercises_<module>.py``."""

import importlib
import inspect
import pathlib
import pkgutil
import re

import nbformat
import pytest

from ddplab import exercises
from ddplab.__main__ import main
from ddplab.exercises import Exercise
from exercise_cells import cell


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_each_answer_passes(name):
    verdict = exercises.check(name, exercises.EXERCISES[name].answer)
    assert verdict.passed, verdict.message
    assert "agree with" in verdict.message


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_an_answer_written_in_a_cell_passes_too(name):
    exercise = exercises.EXERCISES[name]
    source = inspect.getsource(exercise.answer)
    prelude = "import math\nimport torch.nn.functional as F\n"
    verdict = exercises.check(name, cell(prelude + source, exercise.function))
    assert verdict.passed, verdict.message


def test_a_file_without_the_named_function_names_it(tmp_path, capsys):
    other = tmp_path / "other.py"
    other.write_text("def average_gradient(model):\n    pass\n")
    assert main(["exercise", "average-gradients", "--solution", str(other)]) == 2
    err = capsys.readouterr().err
    assert "defines no 'average_gradients' (it defines: average_gradient)" in err


ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_exercise_record_is_found_in_the_labs_order_with_its_own_tests():
    """Every ``Exercise`` any module of the package holds, under any name, is listed: a record
    the discovery missed would be an exercise no lab, command or test sees."""
    held = {}
    for info in pkgutil.iter_modules(exercises.__path__):
        module = importlib.import_module(f"ddplab.exercises.{info.name}")
        for value in vars(module).values():
            if isinstance(value, Exercise):
                held[value.name] = info.name
    assert len(held) == len(exercises.EXERCISES) >= 9
    assert set(held) == set(exercises.EXERCISES)
    labs = [e.lab for e in exercises.EXERCISES.values()]
    assert labs == sorted(labs) and len(set(labs)) == len(labs)  # one per lab, in order
    for module in held.values():
        assert (ROOT / "tests" / f"test_exercises_{module}.py").exists(), module


def test_a_record_with_a_bad_name_lab_or_answer_is_refused():
    good = exercises.exercise("average-gradients")
    fields = {f: getattr(good, f) for f in good.__dataclass_fields__}
    for wrong, match in (({"name": "Average gradients"}, "lower case"),
                         ({"lab": "labs/averaging.ipynb"}, "labs/NN_"),
                         ({"function": "average"}, "named 'average'")):
        with pytest.raises(ValueError, match=match):
            Exercise(**{**fields, **wrong})
    assert Exercise(**fields) == good


def test_the_readme_lists_every_exercise_with_its_lab_in_the_labs_order():
    readme = (ROOT / "README.md").read_text()
    listed = re.findall(r"`([a-z-]+)`\s+\((?:lab )?(\d+)\)", readme)
    assert listed == [(name, str(int(pathlib.Path(e.lab).name[:2])))
                      for name, e in exercises.EXERCISES.items()]


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_each_labs_hidden_answer_is_the_packages(name):
    lab = exercises.EXERCISES[name].lab
    hidden = [c.source for c in nbformat.read(ROOT / lab, as_version=4).cells
              if c.metadata.get("jupyter", {}).get("source_hidden")]
    answer = inspect.getsource(exercises.EXERCISES[name].answer)
    assert any(answer in source for source in hidden), f"{lab}: no hidden cell holds the answer"
