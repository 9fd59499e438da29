"""The equal-batches exercise: the answer passes; each way of leaving the ranks' step counts
unequal is rejected with a message that names it; the plain loop's hang is reported within its
timeout, naming the ranks, with no rank left running; the command's exit codes."""

import inspect
import json
import re
import textwrap
import time

import pytest

from conftest import alive, descendants
from ddplab import exercises
from ddplab.__main__ import main

NAME = "equal-batches"
ANSWER = exercises.equal_batches.EXERCISE.answer
TIMEOUT = 3.0  # a hang waits it out
IMPORTS = ("import itertools\n\nimport torch\nimport torch.distributed as dist\n"
           "import torch.nn.functional as F\n\n\n")
LOOP = """
    for X, y in itertools.islice(loader, int(count)):
        optimizer.zero_grad()
        F.mse_loss(ddp(X), y).backward()
        optimizer.step()
"""


def source(body: str, loop: str = LOOP) -> str:
    """A file that defines ``train_epoch_equal_count``: ``body``, then ``loop``."""
    return (IMPORTS + "def train_epoch_equal_count(ddp, optimizer, loader):\n"
            + textwrap.indent("".join(textwrap.dedent(part).strip("\n") + "\n"
                                      for part in (body, loop) if part.strip()), "    "))


def reader(body: str, loop: str = LOOP):
    """``train_epoch_equal_count`` as a notebook cell defines it (a namespace named
    ``__main__``): shipped to the ranks by value, as a reader's is."""
    namespace = {"__name__": "__main__"}
    exec(compile(source(body, loop), "<cell>", "exec"), namespace)
    return namespace["train_epoch_equal_count"]


PLAIN = ("", """
    for X, y in loader:
        optimizer.zero_grad()
        F.mse_loss(ddp(X), y).backward()
        optimizer.step()
""")

WRONG = {
    "MAX instead of MIN": ("""
        count = torch.tensor(len(loader))
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        """, LOOP, r"^hang: rank\(s\) \[1\] waited .* The batch counts \[2, 3\] were all-reduced "
                   r"with MAX: every rank got 3"),
    "SUM, all_reduce's default": ("""
        count = torch.tensor(len(loader))
        dist.all_reduce(count)
        """, LOOP, r"^hang: .* all-reduced with SUM: every rank got 5, more than any rank has"),
    "the all-reduce on rank 0 only": ("""
        count = torch.tensor(len(loader))
        if dist.get_rank() == 0:
            dist.all_reduce(count, op=dist.ReduceOp.MIN)
        """, LOOP, r"(?s)raised on rank \d.*Only rank 0 all-reduced the number of batches; "
                   r"rank 1 never did"),
    "the extra batches under no_sync": ("", """
        for X, y in loader:
            optimizer.zero_grad()
            with ddp.no_sync():
                F.mse_loss(ddp(X), y).backward()
            optimizer.step()
        """, r"^world size 2, batches per rank \[2, 3\]: rank 1 took 3 steps and rank 0 took "
             r"2: every rank must take as many as the fewest batches \(2\)"),
    "forward through ddp.module": ("""
        count = torch.tensor(len(loader))
        dist.all_reduce(count, op=dist.ReduceOp.MIN)
        """, LOOP.replace("ddp(X)", "ddp.module(X)"),
        r"parameter '0.weight' on rank 1 differs from rank 0's: the gradients were never "
        r"averaged"),
    "no zero_grad": ("""
        count = torch.tensor(len(loader))
        dist.all_reduce(count, op=dist.ReduceOp.MIN)
        """, LOOP.replace("optimizer.zero_grad()", "pass"),
        r"after 2 steps the parameter '0.weight' on rank 0 differs from one process's .*: the "
        r"gradients added up from step to step"),
}


def test_the_answer_passes_on_every_case():
    verdict = exercises.check(NAME, ANSWER, timeout=20)
    assert verdict.passed, verdict.message
    cases = exercises.equal_batches.cases(2)
    assert {size for size, _ in cases} == {2, 3}
    counts = [params["counts"] for _, params in cases]
    assert [2, 3] in counts and [3, 2, 2] in counts and [1, 4, 2] in counts and [2, 2] in counts


@pytest.mark.parametrize("kind", list(WRONG))
def test_a_wrong_solution_is_rejected_naming_the_mistake(kind):
    body, loop, match = WRONG[kind]
    verdict = exercises.check(NAME, reader(body, loop), timeout=TIMEOUT)
    assert not verdict.passed
    assert verdict.case == {"world_size": 2, "counts": [2, 3], "seed": 0}
    assert re.search(match, verdict.message), verdict.message


def test_the_plain_loop_hangs_and_the_hang_names_the_rank_that_waited():
    exercises.check(NAME, ANSWER)  # the pool warm
    before = descendants()
    start = time.monotonic()
    verdict = exercises.check(NAME, reader(*PLAIN), timeout=TIMEOUT)
    assert time.monotonic() - start < TIMEOUT + 5
    assert not verdict.passed
    assert verdict.message.startswith(
        "hang: rank(s) [1] waited in a collective that rank(s) [0] never called (it returned "
        "from train_epoch_equal_count without it)"), verdict.message
    assert "No rank all-reduced its number of batches (batches per rank [2, 3])" \
        in verdict.message
    gone = before - descendants()
    assert gone and not any(alive(pid) for pid in gone)  # the hung ranks were ended


def test_the_command_exits_0_when_passed_1_when_wrong(tmp_path, capsys):
    """In this process (the pool warm); tests/test_exercises.py runs the command itself."""
    right = tmp_path / "right.py"
    right.write_text(IMPORTS + inspect.getsource(ANSWER))
    assert main(["exercise", NAME, "--solution", str(right), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True
    wrong = tmp_path / "wrong.py"
    wrong.write_text(source(*WRONG["the extra batches under no_sync"][:2]))
    assert main(["exercise", NAME, "--solution", str(wrong), "--timeout", str(TIMEOUT)]) == 1
    assert "rank 1 took 3 steps and rank 0 took 2" in capsys.readouterr().out
