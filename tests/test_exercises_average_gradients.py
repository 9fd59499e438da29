"""Exercise ``average-gradients``: the mistakes readers make are rejected, each named; a
collective one rank skips is a hang naming the rank that never came; the command's exit
codes."""

import inspect
import json
import textwrap
import time

import pytest

from conftest import alive, ddplab_cli, descendants
from ddplab import exercises
from exercise_cells import assert_rejected, cell

AVERAGE = {
    "sum without the division": ("""
        def average_gradients(model):
            for p in model.parameters():
                dist.all_reduce(p.grad)
        """, r"every gradient, on every rank, is 2 times the right one: summed over the ranks "
             r"but not divided by the world size \(2\)"),
    "divided, never exchanged": ("""
        def average_gradients(model):
            for p in model.parameters():
                p.grad /= dist.get_world_size()
        """, r"'0.weight' on rank 0 is that rank's own divided by 2: divided, but never "
             r"summed over the ranks"),
    "biases left out": ("""
        def average_gradients(model):
            for name, p in model.named_parameters():
                if name.endswith("weight"):
                    dist.all_reduce(p.grad)
                    p.grad /= dist.get_world_size()
        """, r"'0.bias' on rank 0 is still that rank's own: it was never all-reduced"),
}


@pytest.mark.parametrize("kind", list(AVERAGE))
def test_a_wrong_solution_is_rejected_naming_the_mistake(kind):
    source, match = AVERAGE[kind]
    assert_rejected("average-gradients", source, match)


def test_a_collective_one_rank_skips_is_a_hang_naming_the_rank_that_never_came():
    skips = cell("""
        def average_gradients(model):
            if dist.get_rank() == 0:  # rank 1 never joins
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= dist.get_world_size()
        """, "average_gradients")
    exercises.check("average-gradients", exercises.exercise("average-gradients").answer)  # warm
    before = descendants()
    start = time.monotonic()
    verdict = exercises.check("average-gradients", skips, timeout=3)
    assert time.monotonic() - start < 3 + 5
    assert not verdict.passed
    assert verdict.message.startswith("hang: rank(s) [0] waited in a collective that rank(s) "
                                      "[1] never called"), verdict.message
    gone = before - descendants()
    assert gone and not any(alive(pid) for pid in gone)  # the hung ranks were ended


def test_the_command_exits_0_when_passed_1_when_wrong_2_when_unusable(tmp_path):
    right = tmp_path / "right.py"
    # the answer's annotations name torch: a file Python can import must import it
    right.write_text("import torch\nimport torch.distributed as dist\n\n\n"
                     + inspect.getsource(exercises.average_gradients.EXERCISE.answer))
    done = ddplab_cli("exercise", "average-gradients", "--solution", str(right), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is True and "agree with" in report["message"]
    wrong = tmp_path / "wrong.py"
    wrong.write_text(textwrap.dedent(AVERAGE["sum without the division"][0])
                     .replace("dist.", "torch.distributed."))
    wrong.write_text("import torch\n" + wrong.read_text())
    done = ddplab_cli("exercise", "average-gradients", "--solution", str(wrong))
    assert done.returncode == 1 and "not divided by the world size" in done.stdout
    broken = tmp_path / "broken.py"
    broken.write_text("def average_gradients(model):\n    return (\n\nx = 1\n")
    done = ddplab_cli("exercise", "average-gradients", "--solution", str(broken))
    assert done.returncode == 2 and "broken.py, line 2" in done.stderr, done.stderr
