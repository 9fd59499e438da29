"""Exercise ``gather-unequal``: the answer passes on every case, the sizes asked for included;
the mistakes readers make (a plain all_gather, padding left in, ranks out of order, a result on
rank 0 only, another dtype, a collective skipped on an empty rank) are each rejected with a
message that names them; the command's exit codes."""

import inspect
import textwrap

import pytest

from ddplab import exercises
from ddplab.__main__ import main
from ddplab.exercises import gather_unequal

ANSWER = gather_unequal.EXERCISE.answer

# Pad to the longest and all_gather, as the answer does; {pad} and {end} make the mistakes.
PADDED = """
def gather_unequal(tensor):
    length = torch.tensor([len(tensor)])
    lengths = [torch.zeros_like(length) for _ in range(dist.get_world_size())]
    dist.all_gather(lengths, length)
    longest = int(max(lengths))
    padded = {pad}
    pieces = [torch.zeros_like(padded) for _ in lengths]
    dist.all_gather(pieces, padded)
    trimmed = [piece[:int(n)] for piece, n in zip(pieces, lengths)]
    {end}
"""
SAME_DTYPE = "torch.cat([tensor, tensor.new_zeros(longest - len(tensor))])"


def padded(end: str, pad: str = SAME_DTYPE) -> str:
    return PADDED.format(pad=pad, end=end)


EQUAL_SIZES = ("world size 3, lengths [4, 3, 3], float64: all_gather needs equal sizes: gather "
               "the lengths, pad to the largest, then trim.")
WRONG = {
    "plain all_gather": ("""
        def gather_unequal(tensor):
            pieces = [torch.zeros_like(tensor) for _ in range(dist.get_world_size())]
            dist.all_gather(pieces, tensor)
            return torch.cat(pieces)
        """, [EQUAL_SIZES, "Received data size doesn't match expected size"]),
    "plain all_gather, sized by rank 0": ("""
        def gather_unequal(tensor):
            pieces = [torch.zeros(4, dtype=tensor.dtype) for _ in range(dist.get_world_size())]
            dist.all_gather(pieces, tensor)
            return torch.cat(pieces)
        """, [EQUAL_SIZES, "ProcessGroupGloo::allgather: invalid tensor size"]),
    "padding never trimmed": (padded("return torch.cat(pieces)"), [
        "world size 3, lengths [4, 3, 3], float64: rank 0 got 12 values, want 10: the padding "
        "is still there at positions [7, 11]"]),
    "ranks reversed": (padded("return torch.cat(trimmed[::-1])"), [
        "rank 0 got the right values in the wrong order: the pieces come from ranks [2, 1, 0] "
        "(reversed), want [0, 1, 2]"]),
    "result on rank 0 only": (padded("return torch.cat(trimmed) if dist.get_rank() == 0 "
                                     "else None"), [
        "rank 0 has all 10 values, but rank 1 returned None: every rank needs the result"]),
    "padding of the default dtype": (padded("return torch.cat(trimmed)",
                                            pad="torch.cat([tensor, torch.zeros(longest - "
                                                "len(tensor))])"), [
        "world size 2, lengths [3, 4], int64: rank 0's result is float32, want int64, the "
        "input's dtype"]),
    "no collective on an empty rank": (padded("return torch.cat(trimmed)").replace(
        "(tensor):\n", "(tensor):\n    if not len(tensor):\n        return tensor\n"), [
        "hang: rank(s) [1, 2] waited in a collective that rank(s) [0] never called"]),
}


def cell(source: str):
    """The function as a notebook cell defines it, shipped to the ranks by value."""
    namespace = {"__name__": "__main__"}
    exec(compile("import torch\nimport torch.distributed as dist\n" + textwrap.dedent(source),
                 "<cell>", "exec"), namespace)
    return namespace["gather_unequal"]


def test_the_cases_are_the_ones_that_show_the_mistakes():
    cases = gather_unequal.cases(4)
    lengths = [params["lengths"] for _, params in cases]
    assert [size for size, _ in cases] == [3, 2, 3, 3, 4]
    assert [4, 3, 3] in lengths and [3, 4] in lengths and [0, 2, 1] in lengths
    assert any(len(set(n)) == 1 for n in lengths)  # equal lengths too
    assert {params["dtype"] for _, params in cases} == {"float64", "int64"}


def test_the_answer_passes_on_the_size_asked_for_too():
    verdict = exercises.check("gather-unequal", ANSWER, world_size=4)
    assert verdict.passed, verdict.message
    assert verdict.message == ("5 cases on world sizes [2, 3, 4] agree with every rank's tensor "
                               "concatenated in rank order.")


def test_the_mistakes_template_written_right_passes():
    """Each mistake below is one line away from a right answer."""
    verdict = exercises.check("gather-unequal", cell(padded("return torch.cat(trimmed)")))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("kind", list(WRONG))
def test_a_wrong_solution_is_rejected_naming_the_mistake(kind):
    source, words = WRONG[kind]
    verdict = exercises.check("gather-unequal", cell(source), timeout=3)
    assert not verdict.passed
    for said in words:
        assert said in verdict.message, verdict.message


def test_the_command_exits_0_for_the_answer_and_1_for_a_mistake(tmp_path, capsys):
    """``main`` in this process, where the pool is warm (tests/test_exercises.py runs the
    command in a process of its own)."""
    right = tmp_path / "right.py"
    right.write_text("import torch\nimport torch.distributed as dist\n\n\n"
                     + inspect.getsource(ANSWER))
    assert main(["exercise", "gather-unequal", "--solution", str(right)]) == 0
    assert "gather-unequal: passed." in capsys.readouterr().out
    wrong = tmp_path / "wrong.py"
    wrong.write_text("import torch\nimport torch.distributed as dist\n"
                     + WRONG["padding never trimmed"][0])
    assert main(["exercise", "gather-unequal", "--solution", str(wrong)]) == 1
    assert "the padding is still there" in capsys.readouterr().out
