"""Exercises: write a piece of DDP yourself and check it on real ranks.

    from ddplab import exercises
    exercises.check("average-gradients", average_gradients)     # in a cell: a Grade
    python -m ddplab exercise average-gradients --solution mine.py [--world-size N] [--json]

Each exercise module ends with one record, ``EXERCISE`` (:class:`.record.Exercise`): its name,
the lab that ends with it (the exercises are listed in the labs' order), what the reader writes,
its answer, the cases it is checked on, the rank code that runs the reader's solution and the
comparison with real DDP or torch; where it has them, an ``explain`` that names the mistake
behind a hang or a raise, and a ``judge_in_caller`` that judges the solution here first (a
solution it rejects starts no rank). An exercise is registered by existing, as a chapter is:
every module of this package is imported and its record, if it has one, is listed.
:mod:`.checker` runs the cases. This package imports no chapter.
"""

from __future__ import annotations

import importlib
import pkgutil
import time

from ddplab.common.checks import int_in_range, positive_number
from ddplab.exercises import checker
from ddplab.exercises.checker import Grade, Unusable
from ddplab.exercises.record import Exercise


def _discover() -> dict[str, Exercise]:
    """Every module's ``EXERCISE``, by name, in the labs' order."""
    modules = [importlib.import_module(f"{__name__}.{info.name}")
               for info in pkgutil.iter_modules(__path__)]
    found = [m.EXERCISE for m in modules if isinstance(getattr(m, "EXERCISE", None), Exercise)]
    return {e.name: e for e in sorted(found, key=lambda e: e.lab)}


EXERCISES = _discover()
DEFAULT_TIMEOUT = 20.0

__all__ = ["EXERCISES", "Exercise", "Grade", "Unusable", "check", "exercise"]


def exercise(name: str) -> Exercise:
    """The record of exercise ``name``."""
    if name not in EXERCISES:
        raise ValueError(f"no exercise {name!r}; the exercises: {', '.join(EXERCISES)}")
    return EXERCISES[name]


def check(name: str, solution, world_size: int = 2, timeout: float = DEFAULT_TIMEOUT) -> Grade:
    """Run ``solution`` (the function or class itself) on real ranks, case by case, against
    real DDP or torch; the first case that differs is the verdict's message."""
    spec = exercise(name)
    int_in_range("world_size", world_size, 1, 7)
    positive_number("timeout", timeout)
    if not callable(solution):
        raise TypeError(f"solution must be the function or class {spec.signature}, "
                        f"got {solution!r}")
    start = time.perf_counter()
    if spec.judge_in_caller is not None:  # before any rank starts
        failed = spec.judge_in_caller(solution)
        if failed:
            case, problem = failed
            return Grade(name, False, problem, case, time.perf_counter() - start)
    all_cases = spec.cases(world_size)
    for size, params in all_cases:
        outcome = checker.run_case(spec.on_rank, size, timeout, spec.function,
                                   solution=solution, **params)
        problem = outcome.problem or spec.judge(size, params, outcome.results)
        if outcome.problem and spec.explain is not None:  # a hang or a raise, in words
            problem = spec.explain(size, params, outcome) or problem
        if problem:
            return Grade(name, False, problem, {"world_size": size, **params},
                           time.perf_counter() - start)
    sizes = sorted({size for size, _ in all_cases})
    count = spec.counted or len(all_cases)
    return Grade(name, True, f"{count} cases on world sizes {sizes} agree with "
                               f"{spec.against}.", None, time.perf_counter() - start)
