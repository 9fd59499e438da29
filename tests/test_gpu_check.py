"""``make gpu-check`` (scripts/gpu_check.py): its plan, its runner and its table, checked on a
machine without a GPU by running the same code with gloo on CPU over a small selection."""

import contextlib
import dataclasses
import glob
import importlib.util
import io
import os
import sys
import time

import pytest
import torch

from ddplab import chapters

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("gpu_check",
                                              os.path.join(ROOT, "scripts", "gpu_check.py"))
gpu_check = importlib.util.module_from_spec(spec)
sys.modules["gpu_check"] = gpu_check  # @dataclass looks its module up there
spec.loader.exec_module(gpu_check)


def test_the_plan_covers_every_command_twice_every_page_the_tests_and_the_labs():
    steps = gpu_check.plan()
    one = [s for s in steps if "world size 1, nccl on cuda" in s.group]
    many = [s for s in steps if "default world size, gloo on cuda" in s.group]
    for name in chapters.commands():
        assert any(s.name == name and s.argv[-4:] == ["1", "--backend", "nccl", "--json"]
                   for s in one), name
        assert any(s.name == name and s.argv[-5:] == ["--backend", "gloo", "--device", "cuda",
                                                      "--json"] for s in many), name
    assert {"memory --strategy fsdp", "compress --hook powersgd"} <= {s.name for s in many}
    pages = {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "book", "*.md"))
             if "```{code-cell}" in open(p).read()}
    assert pages and {s.name for s in steps if s.group == "book pages, executed"} == pages
    assert [s.argv[-3:] for s in steps if s.kind == "pytest" and s.group.startswith(
        ("tests", "labs"))] == [["-m", "gpu", "tests"], ["-m", "not gpu", "tests"],
                                ["--dist", "loadfile", "labs"]]


def test_the_plan_runs_every_exercise_right_and_wrong_on_cuda_then_their_tests():
    from ddplab import exercises

    steps = [s for s in gpu_check.plan() if s.group == "exercises, gloo on cuda"]
    assert all(dict(s.env) == {"DDPLAB_BACKEND": "gloo", "DDPLAB_DEVICE": "cuda"}
               for s in steps)
    for name in exercises.EXERCISES:
        right, wrong = [s for s in steps if s.name.split()[0] == name]
        assert (right.expect, wrong.expect) == (0, 1)
        assert right.argv[-1].endswith(".py") and "exercises" in right.argv[-1]
    assert steps[-1].kind == "pytest" and all("test_exercises" in a for a in steps[-1].argv[9:])


def test_a_dry_run_prints_the_plan_and_runs_nothing():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert gpu_check.main(["--dry-run", "--only", "world size 1", "--match", "check"]) == 0
    assert out.getvalue().splitlines() == [
        "commands at world size 1, nccl on cuda: check: " + " ".join(
            [gpu_check.PY, "-m", "ddplab", "check", "--world-size", "1", "--backend", "nccl",
             "--json"])]


@pytest.mark.skipif(torch.cuda.device_count() > 0, reason="this machine has a GPU")
def test_without_a_gpu_it_says_so_and_runs_nothing():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert gpu_check.main(["--only", "world size 1", "--match", "check"]) == 0
    assert "No GPU is visible here" in out.getvalue() and "passed" not in out.getvalue()


def test_the_cpu_path_runs_commands_and_tells_needs_two_ranks_from_a_failure():
    steps = [s for s in gpu_check.plan(cpu=True, groups=["world size 1"])
             if s.name in ("check", "join-logging")]
    assert [s.argv[-5:-1] for s in steps] == [["--backend", "gloo", "--device", "cpu"]] * 2
    outcomes = {s.name: gpu_check.run_step(s) for s in steps}
    assert (outcomes["check"].passed, outcomes["check"].failed) == (1, 0)
    assert (outcomes["join-logging"].needs_more_ranks, outcomes["join-logging"].failed) == (1, 0)
    text = gpu_check.table(list(outcomes.values()))
    assert text.splitlines()[2].split()[-5:-1] == ["1", "0", "1", "0"]  # passed .. refused
    assert "failures" not in text


def test_the_table_counts_and_names_each_failure_by_its_first_error_line():
    command = gpu_check.Step("commands", "clip", ["x"], "command")
    tests = gpu_check.Step("tests", "pytest", ["x"], "pytest")
    traceback = ("Traceback (most recent call last):\n  File \"a.py\", line 1\n"
                 "RuntimeError: No backend type associated with device type cpu\n")
    from ddplab.engine.placement import UNSUPPORTED

    reason = next(iter(UNSUPPORTED.values()))
    outcomes = [
        gpu_check.judge(command, 1, "", traceback, 1.0),
        gpu_check.judge(command, 2, "", f"error: fsdp on gloo on cuda: {reason}.", 1.0),
        gpu_check.judge(command, 0, "{}", "", 1.0),
        gpu_check.judge(tests, 1, "FAILED tests/test_x.py::test_y - AssertionError\n"
                                  "== 3 passed, 1 failed in 2.0s ==", "", 2.0)]
    assert [(o.passed, o.failed, o.refused) for o in outcomes] == [
        (0, 1, 0), (0, 0, 1), (1, 0, 0), (3, 1, 0)]
    text = gpu_check.table(outcomes)
    assert text.splitlines()[2].split()[1:6] == ["1", "1", "0", "1", "3"]  # commands, 3 s
    assert "commands: clip: RuntimeError: No backend type associated with device type cpu" \
        in text
    assert "tests: pytest: FAILED tests/test_x.py::test_y - AssertionError" in text


def test_a_step_whose_modules_are_missing_fails_at_once_naming_them():
    """The H200's pages failed one by one for want of nbconvert and myst_nb: a step now says
    which modules it needs, and one that this Python lacks is not run."""
    pages = [s for s in gpu_check.plan() if s.group == "book pages, executed"]
    assert pages and all({"jupytext", "nbconvert", "myst_nb"} <= set(s.needs) for s in pages)
    assert all("nbval" in s.needs for s in gpu_check.plan() if s.group == "labs under nbval")
    step = gpu_check.Step("book pages, executed", "x.md",
                          [gpu_check.PY, "-c", "raise SystemExit(3)"], "run",
                          needs=("json", "no_such_module_gpu_check_needs"))
    outcome = gpu_check.run_step(step)
    assert (outcome.passed, outcome.failed, outcome.seconds) == (0, 1, 0.0)
    assert outcome.error.startswith("missing Python module(s) no_such_module_gpu_check_needs:")
    assert "requirements-gpu-check.txt" in outcome.error
    ran = gpu_check.run_step(dataclasses.replace(step, needs=("json",)))  # then it runs
    assert ran.failed == 1 and "missing" not in (ran.error or "")


def test_requirements_gpu_check_lists_every_module_a_step_needs():
    with open(os.path.join(ROOT, "requirements-gpu-check.txt")) as f:
        names = {line.split("=")[0].split(">")[0].strip().lower().replace("-", "_")
                 for line in f if line.strip() and not line.startswith("#")}
    modules = {m for s in gpu_check.plan() for m in s.needs}
    distribution = {"xdist": "pytest_xdist"}  # a module's distribution, where they differ
    assert {distribution.get(m, m) for m in modules} <= names
    assert "torch" not in names  # the GPU machine's own CUDA build stays


def test_a_deadline_cuts_the_running_step_and_leaves_the_rest_not_reached():
    """On a GPU lent for minutes the whole plan (about 20 minutes on one H200) cannot finish,
    and a run killed from outside prints no table: with --deadline the step running when time
    is short is given only what is left, the steps after it are 'not reached', and the table
    says so."""
    slow = gpu_check.Step("waits", "sleep", [sys.executable, "-c", "import time; time.sleep(60)"])
    after = gpu_check.Step("later", "never", [sys.executable, "-c", "print(1)"])
    start = time.monotonic()
    outcomes = gpu_check.run_all([slow, after], deadline=gpu_check.SLACK + 3)
    assert time.monotonic() - start < gpu_check.SLACK + 6
    assert outcomes[0].failed and "timed out" in outcomes[0].error
    assert outcomes[1].not_reached and not outcomes[1].failed
    text = gpu_check.table(outcomes)
    assert "not reached before the deadline: 1 step(s), from later: never on" in text
