"""One exercise as one record (torchtitan's ``TrainSpec`` is the shape): what the reader
writes, what a solution is compared with, and the functions that check it. Each exercise module
ends with its ``EXERCISE``; ``ddplab.exercises`` finds them (``EXERCISES``), and ``check``, the
command line, the labs' tests and ``make gpu-check`` read nothing else of a module."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class Exercise:
    name: str  # the command's: python -m ddplab exercise NAME
    lab: str  # the lab that ends with it; the exercises are listed in the labs' order
    function: str  # the name the reader defines, a function or a class
    signature: str  # what the reader writes
    against: str  # what a passing solution agreed with, said by its verdict
    answer: Callable  # the answer; the lab's hidden cell holds its source
    cases: Callable[[int], list[tuple[int, dict]]]  # (world size, parameters) per run
    on_rank: Callable  # runs the reader's solution on a rank: (ctx, solution, call_id, **params)
    judge: Callable[[int, dict, list], str | None]  # a run's results -> the mistake, or None
    # (world size, parameters, checker.Outcome) -> the mistake behind a hang or a raise, or None
    explain: Callable | None = None
    # solution -> (case, mistake) or None: judged in the caller first, a rejected one starts
    # no rank
    judge_in_caller: Callable | None = None
    counted: int | None = None  # the cases a verdict counts where one run checks several

    def __post_init__(self):
        if not re.fullmatch(r"[a-z]+(-[a-z]+)*", self.name):
            raise ValueError(f"an exercise's name is a command's: lower case words joined by "
                             f"'-', got {self.name!r}")
        if not re.fullmatch(r"labs/\d\d_\w+\.ipynb", self.lab):
            raise ValueError(f"an exercise's lab is labs/NN_<chapter>.ipynb, got {self.lab!r}")
        if getattr(self.answer, "__name__", None) != self.function:
            raise ValueError(f"the answer of {self.name!r} must be named {self.function!r}, as "
                             "the reader's is")
