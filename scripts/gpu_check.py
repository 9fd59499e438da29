"""Everything ddplab offers, run on a machine with a GPU, and one table of what passed.

    make gpu-check                        # or: python scripts/gpu_check.py
    python scripts/gpu_check.py --dry-run # the plan, nothing run (any machine)
    python scripts/gpu_check.py --deadline 500 --only "world size 1"  # a GPU lent for minutes

On a machine with at least one GPU it runs, in this order:

* every command (``python -m ddplab --help``) at world size 1 on NCCL (``--backend nccl``);
  a command that needs two ranks or more exits 2 with "world_size must be ...": counted as
  "needs W>=2", not as a failure;
* every command at its default world size with gloo on CUDA tensors on the GPU(s)
  (``--backend gloo --device cuda``); what ddplab refuses there (``engine.placement.UNSUPPORTED``,
  e.g. FSDP) exits 2 with that reason: counted as "refused";
* every exercise (``python -m ddplab exercise NAME``) with gloo on CUDA tensors: its reference
  (the exercise's own module, which defines the answer) must pass (exit 0) and a solution that
  does nothing must be rejected (exit 1); then the exercises' tests (each mistake readers make)
  on the same placement;
* every book page, executed (``jupytext --execute``), with the default placement;
* the tests: those marked ``gpu`` (skipped elsewhere), then the rest;
* every lab under nbval;
* the GPU benchmark, ``benchmarks/gpu.py``, where it exists.

It prints one table (what, how many passed, failed, needed W>=2 or were refused, and the first
error line of each failure) and exits 1 if anything failed. Without a GPU it says so and exits
0 having run nothing. Every step runs this checkout's ``src`` (first on ``PYTHONPATH``), so
ddplab need not be installed; the Python modules a step needs beyond torch (``Step.needs``:
jupytext, nbconvert, nbclient, ipykernel and myst_nb for the pages, pytest, pytest-xdist and
nbval for the tests and labs) are looked for first, and a step whose modules are missing
fails at once, naming them: ``requirements-gpu-check.txt`` lists them all, for a machine
without internet (README, "gpu-check on a machine without internet").

``--cpu`` runs the same plan with gloo on CPU in place of NCCL and CUDA:
that is how the tests check this script's runner and table on a machine without a GPU
(``tests/test_gpu_check.py``), so the GPU path runs the same code.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
# Variants beyond a command's defaults: the crashes were in these.
VARIANTS = {"memory": [["--strategy", "zero1"], ["--strategy", "fsdp"]],
            "compress": [["--hook", "powersgd"]]}
NEEDS_MORE_RANKS = re.compile(r"world_size must be (between 2 and|an int >= 2)")
# Python modules beyond torch and ddplab's own (requirements-gpu-check.txt installs them all)
PAGES = ("jupytext", "nbconvert", "nbclient", "ipykernel", "myst_nb")
PYTEST = ("pytest", "xdist", "psutil")
LABS = (*PYTEST, "nbval", "ipykernel")


@dataclasses.dataclass(frozen=True)
class Step:
    """One thing to run: a command line, and how to read its outcome ("command": exit status;
    "pytest": the summary line's counts; "run": exit status)."""

    group: str
    name: str
    argv: list
    kind: str = "run"
    timeout: float = 600.0
    env: tuple = ()  # extra environment, (name, value) pairs
    expect: int = 0  # the exit status that passes ("run" and "command" steps)
    needs: tuple = ()  # Python modules it imports beyond torch and ddplab's own


@dataclasses.dataclass
class Outcome:
    step: Step
    passed: int = 0
    failed: int = 0
    needs_more_ranks: int = 0
    refused: int = 0
    not_reached: int = 0  # the deadline came before the step could start
    error: str | None = None  # the first error line of a failure
    seconds: float = 0.0


def commands() -> list[str]:
    sys.path.insert(0, os.path.join(ROOT, "src"))
    from ddplab import chapters

    return list(chapters.commands())


def plan(cpu: bool = False, groups=None, match: str | None = None, workers: int = 3) -> list[Step]:
    """What to run, in order; ``cpu`` puts gloo on CPU where a GPU would be used; ``workers``
    is pytest's ``-n`` for the tests and the labs."""
    one = ["--backend", "gloo", "--device", "cpu"] if cpu else ["--backend", "nccl"]
    many = ["--backend", "gloo", "--device", "cpu"] if cpu else ["--backend", "gloo",
                                                                  "--device", "cuda"]
    where_one = "gloo on cpu" if cpu else "nccl on cuda"
    where_many = "gloo on cpu" if cpu else "gloo on cuda"
    steps = []
    for name in commands():
        for extra in [[]] + VARIANTS.get(name, []):
            label = " ".join([name, *extra])
            steps.append(Step(f"commands at world size 1, {where_one}", label,
                              [PY, "-m", "ddplab", name, *extra, "--world-size", "1", *one,
                               "--json"], "command", 300))
            steps.append(Step(f"commands at default world size, {where_many}", label,
                              [PY, "-m", "ddplab", name, *extra, *many, "--json"], "command", 300))
    # the report of this machine: what one rank measures, and several on one GPU
    steps.append(Step(f"commands at world size 1, {where_one}", "report",
                      [PY, "-m", "ddplab", "report", "--world-size", "1", *one, "--quick",
                       "--out", os.path.join(os.environ.get("TMPDIR", "/tmp"), "gpu-report-1"),
                       "--json"], "command", 600))
    steps.append(Step(f"commands at default world size, {where_many}", "report",
                      [PY, "-m", "ddplab", "report", "--world-size", "2", *many, "--quick",
                       "--out", os.path.join(os.environ.get("TMPDIR", "/tmp"), "gpu-report-2"),
                       "--json"], "command", 600))
    steps += exercise_steps("cpu" if cpu else "cuda")
    for page in sorted(glob.glob(os.path.join(ROOT, "book", "*.md"))):
        name = os.path.basename(page)
        if not is_notebook(page):
            continue
        out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"gpu-check-{name[:-3]}.ipynb")
        steps.append(Step("book pages, executed", name,
                          [PY, "-m", "jupytext", "--to", "ipynb", "--execute",
                           "--set-kernel", "python3", page, "-o", out], "run", 900,
                          needs=PAGES))
    pytest = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    steps.append(Step("tests marked gpu", "pytest -m gpu", [*pytest, "-n", "0", "-m", "gpu",
                                                            "tests"], "pytest", 1800,
                      needs=PYTEST))
    steps.append(Step("tests, the rest", "pytest -m 'not gpu' tests",
                      [*pytest, "-n", str(workers), "--dist", "loadfile", "-m", "not gpu",
                       "tests"],
                      "pytest", 3600, needs=PYTEST))
    steps.append(Step("labs under nbval", "pytest labs",
                      [*pytest, "-n", str(workers), "--dist", "loadfile", "labs"], "pytest",
                      3600, needs=LABS))
    bench = os.path.join(ROOT, "benchmarks", "gpu.py")
    if os.path.exists(bench):
        steps.append(Step("GPU benchmark", "benchmarks/gpu.py", [PY, bench], "run", 1800))
    if groups:
        steps = [s for s in steps if any(g in s.group for g in groups)]
    if match:
        steps = [s for s in steps if match in s.name]
    return steps


def exercise_steps(device: str) -> list[Step]:
    """Each exercise through the command line on gloo with ``device`` tensors (placed by
    ``DDPLAB_BACKEND``/``DDPLAB_DEVICE``): the reference passes, a do-nothing solution is
    rejected; then the exercises' own tests, every mistake they hold, on the same placement."""
    sys.path.insert(0, os.path.join(ROOT, "src"))
    from ddplab import exercises

    env = (("DDPLAB_BACKEND", "gloo"), ("DDPLAB_DEVICE", device))
    group = f"exercises, gloo on {device}"
    steps = []
    for name, exercise in exercises.EXERCISES.items():
        command = [PY, "-m", "ddplab", "exercise", name, "--json", "--solution"]
        steps.append(Step(group, f"{name} reference", [*command, inspect.getfile(exercise.answer)],
                          "command", 300, env))
        steps.append(Step(group, f"{name} does nothing", [*command, does_nothing(exercise)],
                          "command", 300, env, expect=1))
    tests = sorted(glob.glob(os.path.join(ROOT, "tests", "test_exercises*.py")))
    steps.append(Step(group, "their tests", [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                             "-n", "0", *tests], "pytest", 1800, env,
                      needs=PYTEST))
    return steps


def does_nothing(exercise) -> str:
    """A file defining the exercise's function (or class) with no body worth the name: a
    wrong solution every exercise must reject."""
    name = exercise.function
    if name[0].isupper():  # a class: a module wrapper, or an optimizer, that does nothing
        base = "torch.optim.SGD" if "Optimizer" in name else "torch.nn.Module"
        body = (f"class {name}({base}):\n"
                "    def __init__(self, module, *args, **kwargs):\n"
                + ("        super().__init__(module, lr=0.1)\n" if "Optimizer" in name else
                   "        super().__init__()\n        self.module = module\n\n"
                   "    def forward(self, *args, **kwargs):\n"
                   "        return self.module(*args, **kwargs)\n\n"
                   "    def finish_gradient_synchronization(self):\n        pass\n"))
    else:
        body = f"def {name}(*args, **kwargs):\n    return None\n"
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"gpu-check-wrong-{exercise.name}.py")
    with open(path, "w") as f:
        f.write("import torch\n\n" + body)
    return path


def is_notebook(page: str) -> bool:
    """A page with code cells (the book's front matter names a kernel)."""
    with open(page) as f:
        return "```{code-cell}" in f.read()


def missing(modules) -> list[str]:
    """Those of ``modules`` this Python cannot import."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def run_step(step: Step) -> Outcome:
    """Run one step with this checkout's ``src`` first on ``PYTHONPATH``; a step whose
    modules are missing fails at once, naming them."""
    absent = missing(step.needs)
    if absent:
        return Outcome(step, failed=1, error=f"missing Python module(s) {', '.join(absent)}: "
                                             "pip install -r requirements-gpu-check.txt")
    start = time.perf_counter()
    path = os.pathsep.join(p for p in (os.path.join(ROOT, "src"),
                                       os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, **dict(step.env)}
    try:
        done = subprocess.run(step.argv, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=step.timeout)
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = None, str(exc.stdout or ""), f"timed out after {step.timeout:g} s"
    return judge(step, code, out, err, time.perf_counter() - start)


def judge(step: Step, code: int | None, out: str, err: str, seconds: float) -> Outcome:
    """What a finished step means: pass, fail (with its first error line), a command that needs
    more ranks, or one ddplab refuses on this placement."""
    outcome = Outcome(step, seconds=seconds)
    if step.kind == "pytest":
        counts = pytest_counts(out)
        outcome.passed = counts.get("passed", 0)
        outcome.failed = counts.get("failed", 0) + counts.get("error", 0) \
            + counts.get("errors", 0)
        if code not in (0, 5) and not outcome.failed:  # 5: nothing collected (no gpu tests)
            outcome.failed = 1
        if outcome.failed:
            outcome.error = first_error(out + "\n" + err, pytest=True)
        return outcome
    if code == step.expect:
        outcome.passed = 1
    elif step.kind == "command" and code == 2 and NEEDS_MORE_RANKS.search(err):
        outcome.needs_more_ranks = 1
    elif step.kind == "command" and code == 2 and refused(err):
        outcome.refused = 1
    else:
        outcome.failed = 1
        outcome.error = first_error(err or out)
    return outcome


def refused(err: str) -> bool:
    sys.path.insert(0, os.path.join(ROOT, "src"))
    from ddplab.engine.placement import UNSUPPORTED

    return any(reason in err for reason in UNSUPPORTED.values())


def pytest_counts(out: str) -> dict:
    """{"passed": n, "failed": n, ...} from pytest's last summary line."""
    lines = [line for line in out.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    if not lines:
        return {}
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", lines[-1])}


def first_error(text: str, pytest: bool = False) -> str:
    """The line that says what went wrong: pytest's first FAILED/ERROR line, else the last
    line naming an error (a traceback ends with it), else the last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if pytest:
        found = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
        if found:
            return found[0]
    found = [line for line in lines if re.search(r"(Error|Exception|error:|timed out)", line)]
    return (found or lines or ["(no output)"])[-1][:200]


def verdict(outcome: Outcome) -> str:
    """One step's outcome in a line: its counts, seconds and first error line."""
    if outcome.not_reached:
        return "not reached: the deadline came first"
    counts = ", ".join(f"{getattr(outcome, f)} {f.replace('_', ' ')}" for f in
                       ("passed", "failed", "needs_more_ranks", "refused")
                       if getattr(outcome, f))
    error = f": {outcome.error}" if outcome.error else ""
    return f"{counts or 'nothing counted'} in {outcome.seconds:.0f} s{error}"


def table(outcomes: list[Outcome]) -> str:
    """One row per group (what, passed, failed, needs W>=2, refused, seconds), then the first
    error line of each failure."""
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault(o.step.group, []).append(o)
    header = f"{'what':<46} {'passed':>6} {'failed':>6} {'needs W>=2':>10} {'refused':>7} " \
             f"{'seconds':>8}"
    lines = [header, "-" * len(header)]
    for group, rows in groups.items():
        total = {f: sum(getattr(o, f) for o in rows)
                 for f in ("passed", "failed", "needs_more_ranks", "refused", "seconds")}
        lines.append(f"{group:<46} {total['passed']:>6} {total['failed']:>6} "
                     f"{total['needs_more_ranks']:>10} {total['refused']:>7} "
                     f"{total['seconds']:>8.0f}")
    late = [o for o in outcomes if o.not_reached]
    if late:
        lines += ["", f"not reached before the deadline: {len(late)} step(s), from "
                      f"{late[0].step.group}: {late[0].step.name} on"]
    failures = [o for o in outcomes if o.failed]
    if failures:
        lines += ["", "failures (the first error line of each):"]
        lines += [f"  {o.step.group}: {o.step.name}: {o.error}" for o in failures]
    return "\n".join(lines)


SLACK = 5.0  # seconds: a step is not started with less left before the deadline


def run_all(steps: list[Step], deadline: float | None = None) -> list[Outcome]:
    """Every step in order. With ``deadline`` (seconds from now), a step gets at most the time
    left as its timeout and is not started with less than ``SLACK`` left, so that the table
    is printed within the deadline (a GPU lent for a few minutes: the first steps count
    most)."""
    end = None if deadline is None else time.monotonic() + deadline
    outcomes = []
    for step in steps:
        print(f"[{len(outcomes) + 1}/{len(steps)}] {step.group}: {step.name}", flush=True)
        left = None if end is None else end - time.monotonic()
        if left is not None and left < SLACK:
            outcomes.append(Outcome(step, not_reached=1))
        else:
            timeout = step.timeout if left is None else min(step.timeout, left - SLACK / 2)
            outcomes.append(run_step(dataclasses.replace(step, timeout=timeout)))
        print(f"    {verdict(outcomes[-1])}", flush=True)  # a run cut short still shows these
    return outcomes


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def main(argv=None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")
    cli.add_argument("--cpu", action="store_true",
                     help="gloo on CPU in place of NCCL and CUDA (to check this script)")
    cli.add_argument("--only", nargs="*", default=None,
                     help="only the groups whose name contains one of these words")
    cli.add_argument("--match", default=None, help="only the steps whose name contains this")
    cli.add_argument("--workers", type=int, default=3,
                     help="pytest's -n for the tests and the labs (default 3)")
    cli.add_argument("--deadline", type=float, default=None,
                     help="seconds for the whole run: steps that cannot start before it are "
                          "'not reached', and the table is printed in time")
    args = cli.parse_args(argv)
    steps = plan(cpu=args.cpu, groups=args.only, match=args.match, workers=args.workers)
    if args.dry_run:
        for step in steps:
            print(f"{step.group}: {step.name}: {' '.join(step.argv)}")
        return 0
    gpus = gpu_count()
    if gpus == 0 and not args.cpu:
        print("No GPU is visible here (torch.cuda.device_count() == 0): nothing was run. "
              "Run `make gpu-check` on a machine with at least one GPU.")
        return 0
    absent = sorted({m for step in steps for m in missing(step.needs)})
    if absent:  # said first, so that a run without them can be stopped at once
        print(f"Missing here: {', '.join(absent)}; the steps that need them will fail. "
              "pip install -r requirements-gpu-check.txt (README: without internet, as wheels)",
              flush=True)
    outcomes = run_all(steps, args.deadline)
    where = "gloo on CPU ranks (--cpu)" if args.cpu else f"{gpus} GPU(s)"
    print(f"\nddplab on {where}, torch {torch_version()}:\n")
    print(table(outcomes))
    return 1 if any(o.failed for o in outcomes) else 0


def torch_version() -> str:
    import torch

    return f"{torch.__version__} (CUDA {torch.version.cuda})"


if __name__ == "__main__":
    sys.exit(main())
