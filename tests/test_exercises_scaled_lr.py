"""The scaled-lr exercise: the answer is the learning-rate chapter's own schedule and passes on
real ranks; each mistake in the schedule is rejected in the caller, before any rank starts,
with a message that names the first case that differs and the mistake; a schedule that differs
only on the ranks is caught by the DDP training; the parameter check tells one schedule from
another; the command's exit code and JSON; the lab's hidden answer is the package's."""

import inspect
import json
import math
import textwrap

import numpy as np
import pytest

from ddplab import exercises
from ddplab.__main__ import main
from ddplab.chapters.lr_scaling.lr_scaling import RULES, lr_schedule
from ddplab.exercises import scaled_lr

NAME = "scaled-lr"
ANSWER = scaled_lr.EXERCISE.answer
IMPORTS = "import math\n\nimport torch.distributed as dist\n\n\n"
# The answer's shape; {factors}, {ramp} and {late} make the mistakes.
TEMPLATE = """
def scaled_lr(step, lr, world_size, rule, warmup_steps):
    peak = lr * {factors}[rule]
    if step >= warmup_steps{late}:
        return peak
    return {ramp}
"""
FACTORS = '{"none": 1.0, "linear": world_size, "sqrt": math.sqrt(world_size)}'
RAMP = "lr + (peak - lr) * step / warmup_steps"


def schedule(factors: str = FACTORS, ramp: str = RAMP, late: str = "") -> str:
    return TEMPLATE.format(factors=factors, ramp=ramp, late=late)


def cell(source: str):
    """``scaled_lr`` as a notebook cell defines it (a namespace named ``__main__``): shipped to
    the ranks by value, as a reader's is."""
    namespace = {"__name__": "__main__"}
    exec(compile(IMPORTS + textwrap.dedent(source), "<cell>", "exec"), namespace)
    return namespace["scaled_lr"]


FIRST = "at step 1, lr 0.1, 4 ranks, rule linear, 10 warmup steps: yours "
WRONG = {
    "ramps from 0": (schedule(ramp="peak * step / warmup_steps"), [
        "at step 0, lr 0.1, 4 ranks, rule linear, 10 warmup steps: yours 0, expected 0.1. "
        "Yours ramps from 0; Goyal et al. ramp from the one-process rate"]),
    "linear and sqrt swapped": (schedule(factors='{"none": 1.0, "linear": math.sqrt('
                                                 'world_size), "sqrt": world_size}'), [
        FIRST + "0.11, expected 0.13. After the warmup yours is lr x 2; rule linear multiplies "
                "lr by the world size, 4: linear and sqrt swapped"]),
    "sqrt as world_size / 2": (schedule(factors='{"none": 1.0, "linear": world_size, '
                                                '"sqrt": world_size / 2}'), [
        "at step 1, lr 0.15, 8 ranks, rule sqrt, 10 warmup steps: yours 0.195, expected "
        "0.177426.", "yours is world_size / 2; the square root is math.sqrt(world_size)"]),
    "peak one step late": (schedule(ramp="lr + (peak - lr) * step / (warmup_steps + 1)",
                                    late=" + 1"), [
        FIRST + "0.127273, expected 0.13. Yours reaches the scaled rate one step late, at "
                "step 11"]),
    "peak one step early": (schedule(ramp="lr + (peak - lr) * (step + 1) / warmup_steps"), [
        "at step 0, lr 0.1, 4 ranks, rule linear, 10 warmup steps: yours 0.13, expected 0.1. "
        "Yours reaches the scaled rate one step early, at step 9"]),
    "world size ignored": (schedule(factors='{"none": 1.0, "linear": 1, "sqrt": 1}'), [
        FIRST + "0.1, expected 0.13.", "Yours is the none rule's rate", "the rule scales by "
        "the world size, not by the per-rank batch"]),
    "no warmup": (schedule(late=" or True"), [
        "at step 0, lr 0.1, 4 ranks, rule linear, 10 warmup steps: yours 0.4, expected 0.1. "
        "No warmup: with warmup_steps=10 the rate starts at lr"]),
    "divided by warmup_steps=0": (schedule(late=" and False").replace(
        "return lr + (peak - lr) * step / warmup_steps",
        "return lr + (peak - lr) * min(step / warmup_steps, 1)"), [
        "at step 0, lr 0.1, 4 ranks, rule linear, 0 warmup steps: scaled_lr raised "
        "ZeroDivisionError", "warmup_steps=0 means no warmup: the scaled rate from step 0"]),
    "LambdaLR's multiplier": (schedule() + "\n\n_rate = scaled_lr\n\n\n"
                              "def scaled_lr(step, lr, world_size, rule, warmup_steps):\n"
                              "    return _rate(step, lr, world_size, rule, warmup_steps) / lr\n",
                              ["yours 1, expected 0.1. Yours is the rate divided by lr"]),
    "counts its calls": (schedule() + "\n\n_rate, _calls = scaled_lr, []\n\n\n"
                         "def scaled_lr(step, lr, world_size, rule, warmup_steps):\n"
                         "    _calls.append(step)\n"
                         "    return _rate(len(_calls) - 1, lr, world_size, rule, "
                         "warmup_steps)\n",
                         ["at step 9, lr 0.1, 4 ranks, rule linear, 10 warmup steps: yours gave "
                          "0.37 the first time and 0.4 when asked again"]),
}
# Right in the caller, where no process group exists; on the ranks, only rank 0 scales.
RANK_0_ONLY = schedule().replace("    if step", "    if dist.is_initialized() and "
                                 "dist.get_rank() > 0:\n        peak = lr\n    if step")


def test_the_answer_is_the_chapters_schedule_and_the_cases_cover_its_corners():
    for lr, world_size, rule, warmup_steps in scaled_lr.CONFIGS:
        steps = warmup_steps + scaled_lr.PAST_WARMUP
        chapter = lr_schedule(lr, rule, world_size, warmup_steps, steps)
        assert [ANSWER(t, lr, world_size, rule, warmup_steps) for t in range(steps)] == chapter
        assert np.allclose(scaled_lr.schedule(lr, world_size, rule, warmup_steps, steps),
                           chapter, rtol=1e-12, atol=0)
    # the lab's claim: 8 ranks, lr 0.15, from lr to the rule's rate in 10 steps
    ramp = [ANSWER(t, 0.15, 8, "sqrt", 10) for t in range(11)]
    assert np.allclose(ramp, np.linspace(0.15, 0.15 * math.sqrt(8), 11), rtol=1e-12, atol=0)
    cases = scaled_lr.SCHEDULE_CASES
    assert {rule for *_, rule, _ in cases} == set(RULES)
    assert {step for step, *_ in cases} >= {0} and any(s == w > 0 for s, *_, w in cases)
    assert {w for *_, w in cases} >= {0, 1} and {n for _, _, n, _, _ in cases} >= {1, 4, 8}


def test_the_answer_passes_on_the_size_asked_for_too():
    verdict = exercises.check(NAME, ANSWER, world_size=3)
    assert verdict.passed, verdict.message
    assert verdict.message == (
        "2 cases on world sizes [3, 4] agree with one process on the whole global batches (DDP "
        "stepped through LambdaLR by your schedule, whose 92 learning rates on world sizes 1 to "
        "8 agree with Goyal et al.'s gradual warmup).")


def test_the_mistakes_template_written_right_passes():
    """Each schedule mistake below is one change away from a right answer."""
    assert scaled_lr.judge_in_caller(cell(schedule())) is None


@pytest.mark.parametrize("kind", list(WRONG))
def test_a_wrong_schedule_is_rejected_in_the_caller_naming_the_mistake(kind):
    source, words = WRONG[kind]
    # A millisecond: any case run on ranks would come back as a hang, not as these words.
    verdict = exercises.check(NAME, cell(source), timeout=1e-3)
    assert not verdict.passed
    for said in words:
        assert said in verdict.message, verdict.message
    assert set(verdict.case) == {"step", "lr", "world_size", "rule", "warmup_steps"}


def test_a_schedule_that_differs_only_on_the_ranks_is_caught_by_the_ddp_training():
    rank_0_only = cell(RANK_0_ONLY)
    assert scaled_lr.judge_in_caller(rank_0_only) is None
    verdict = exercises.check(NAME, rank_0_only)
    assert not verdict.passed
    assert verdict.message.startswith(
        "DDP on 2 ranks, lr 0.1, rule linear, 3 warmup steps, 6 steps through LambdaLR: rank 1 "
        "stepped with lr 0.1 at step 1, the schedule says 0.133333, rank 0 with 0.133333: the "
        "ranks stepped with different rates"), verdict.message
    assert verdict.case == {"world_size": 2, **scaled_lr.TRAININGS[0]}


def test_the_parameter_check_tells_one_schedule_from_another():
    """The DDP part compares parameters within 1e-6: a run stepped by another schedule (the
    none rule's) is far outside it, so matching parameters do say which schedule ran."""
    params = scaled_lr.TRAININGS[0]
    want = scaled_lr.one_process(2, **params)
    other = scaled_lr.one_process(2, **{**params, "rule": "none"})
    assert scaled_lr.compare_params("here", 6, [want, want], want) is None
    assert scaled_lr.compare_params("here", 6, [want, other], want).startswith(
        "here: after 6 steps the parameter '0.weight' on rank 1 differs from one process's on "
        "the whole global batches by up to ")


def test_the_command_exits_0_for_the_answer_and_1_with_the_case_in_its_json(tmp_path, capsys):
    """``main`` in this process, where the pool is warm (tests/test_exercises.py runs the
    command in a process of its own)."""
    right = tmp_path / "right.py"
    right.write_text("import math\n\n\n" + inspect.getsource(ANSWER))
    assert main(["exercise", NAME, "--solution", str(right), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True
    wrong = tmp_path / "wrong.py"
    wrong.write_text(IMPORTS + WRONG["ramps from 0"][0])
    assert main(["exercise", NAME, "--solution", str(wrong), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is False and "Yours ramps from 0" in report["message"]
    assert report["case"] == {"step": 0, "lr": 0.1, "world_size": 4, "rule": "linear",
                              "warmup_steps": 10}
