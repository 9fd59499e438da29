"""Exercises: write a piece of DDP yourself and check it on real ranks.

    from ddplab import exercises
    exercises.check("average-gradients", average_gradients)     # in a cell: a Verdict
    python -m ddplab exercise average-gradients --solution mine.py [--world-size N] [--json]

Each exercise module holds what the reader writes (``SIGNATURE``), its answer (``answer``), the
cases it is checked on (``cases``), the lab that ends with it (``LAB``; the exercises are
found by these names, in the labs' order), the rank code that runs the reader's solution
(``on_rank``) and the comparison with real DDP or torch (``judge``); when a case hangs or
raises, a module's ``explain`` (where it has one) may name the mistake behind it, from the
error and what the ranks noted. A module's ``judge_in_caller`` (where it has one) judges the
solution here first, and a solution it rejects starts no rank. :mod:`.checker` runs them.
This package imports no chapter.
"""

from __future__ import annotations

import importlib
import pathlib
import pkgutil
import re
import time

from ddplab.common.checks import int_in_range, positive_number
from ddplab.exercises import checker
from ddplab.exercises.checker import Unusable, Verdict


def _discover() -> dict:
    """Every module of this package that names an exercise (a top-level ``NAME, LAB = ...``) and
    its lab (``LAB``), in the labs' order: an exercise is registered by existing, as a chapter
    is. The others (the checker, the labs' prediction widget, which imports ipywidgets) are
    not imported for this."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        path = pathlib.Path(__path__[0]) / f"{info.name}.py"
        if re.search(r"^NAME(, LAB)? = ", path.read_text(), re.M):
            found.append(importlib.import_module(f"{__name__}.{info.name}"))
    return {m.NAME: m for m in sorted(found, key=lambda m: m.LAB)}


EXERCISES = _discover()
DEFAULT_TIMEOUT = 20.0

__all__ = ["EXERCISES", "Unusable", "Verdict", "check", "exercise"]


def exercise(name: str):
    """The module of exercise ``name``."""
    if name not in EXERCISES:
        raise ValueError(f"no exercise {name!r}; the exercises: {', '.join(EXERCISES)}")
    return EXERCISES[name]


def check(name: str, solution, world_size: int = 2, timeout: float = DEFAULT_TIMEOUT) -> Verdict:
    """Run ``solution`` (the function or class itself) on real ranks, case by case, against
    real DDP or torch; the first case that differs is the verdict's message."""
    module = exercise(name)
    int_in_range("world_size", world_size, 1, 7)
    positive_number("timeout", timeout)
    if not callable(solution):
        raise TypeError(f"solution must be the function or class {module.SIGNATURE}, "
                        f"got {solution!r}")
    start = time.perf_counter()
    if hasattr(module, "judge_in_caller"):  # before any rank starts
        failed = module.judge_in_caller(solution)
        if failed:
            case, problem = failed
            return Verdict(name, False, problem, case, time.perf_counter() - start)
    all_cases = module.cases(world_size)
    for size, params in all_cases:
        outcome = checker.run_case(module.on_rank, size, timeout, module.FUNCTION,
                                   solution=solution, **params)
        problem = outcome.problem or module.judge(size, params, outcome.results)
        if outcome.problem and hasattr(module, "explain"):  # a hang or a raise, in words
            problem = module.explain(size, params, outcome) or problem
        if problem:
            return Verdict(name, False, problem, {"world_size": size, **params},
                           time.perf_counter() - start)
    sizes = sorted({size for size, _ in all_cases})
    count = len(getattr(module, "CASES", all_cases))
    return Verdict(name, True, f"{count} cases on world sizes {sizes} agree with "
                               f"{module.AGAINST}.", None, time.perf_counter() - start)
