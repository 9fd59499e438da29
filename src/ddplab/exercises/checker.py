"""Running a reader's solution on real ranks, one case per call, and saying what went wrong.

* :func:`run_case` calls ``ddplab.run(on_rank, world_size, timeout=...)`` for one case. Every rank
  notes in its log (``hang_watch.note``) when it enters and leaves the reader's code, so when a
  collective only some ranks call hangs, the caller's timeout ends every rank (the pool starts
  fresh ones on the next call) and the notes say which ranks waited and which never came.
* The checker's own rank code calls no collective after the reader's: each rank returns its
  gradients and the caller compares them, so a missing collective cannot pair with one of ours.
* A hang or a raise comes back with every rank's notes: an exercise's ``explain`` may put
  what they show (the collectives a rank started, say) into words.
* :func:`watching` (``ddplab.common.process_group_spy``) lets an exercise see each call of the
  process group's methods that the reader's code makes (:func:`watching_allreduce`: each
  all-reduce it starts).
* :func:`compare_grads` says which parameter differs, on which rank, and by what factor.
* :func:`load_solution` reads a ``.py`` file for the command line.
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import os
import sys
import time
import uuid

import numpy as np

import ddplab
from ddplab.common.process_group_spy import watching
from ddplab.engine import hang_watch


class Unusable(ValueError):
    """The solution file cannot be used: a syntax error, or the named function is missing."""


@dataclasses.dataclass
class Grade:
    """The checker's answer: passed or not, and a message that says what differs and where."""

    name: str
    passed: bool
    message: str
    case: dict | None = None  # the case that failed
    seconds: float = 0.0

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def __str__(self):
        return f"{self.name}: {'passed' if self.passed else 'not yet'}. {self.message}"


@dataclasses.dataclass
class Outcome:
    results: list | None  # per rank, when every rank answered
    problem: str | None  # the hang or the error, in words
    notes: list[list[dict]] | None = None  # per rank, what it noted, when it hung or raised


def run_case(on_rank, world_size: int, timeout: float, what: str, **params) -> Outcome:
    """One case on ``world_size`` ranks; a hang or a raise becomes ``problem``."""
    call_id = uuid.uuid4().hex
    start = time.perf_counter()
    try:
        return Outcome(ddplab.run(on_rank, world_size, timeout=timeout, call_id=call_id,
                                  **params), None)
    except TimeoutError:
        problem = hang_message(call_id, world_size, what, time.perf_counter() - start)
    except ddplab.RankError as exc:
        if "timed out" in str(exc).lower():  # the group's own timeout fired first
            problem = hang_message(call_id, world_size, what, time.perf_counter() - start)
        else:
            summary = str(exc).split("\n\nTraceback")[0]
            said = f"rank {exc.rank} raised "  # the rank is named once
            error = summary[len(said):] if summary.startswith(said) else summary
            problem = f"{what} raised on rank {exc.rank}: {error}"
    return Outcome(None, problem, hang_watch.read_notes(call_id, world_size))


def enter(call_id: str, rank: int) -> None:
    hang_watch.note(call_id, rank, entered=True)


def leave(call_id: str, rank: int) -> None:
    hang_watch.note(call_id, rank, left=True)


def watching_allreduce(see):
    """Inside the block, every ``dist.all_reduce`` first calls ``see(tensors, *args,
    **kwargs)`` (:func:`watching` on ``ProcessGroup.allreduce``)."""
    return watching(lambda _, *args, **kwargs: see(*args, **kwargs), "allreduce")


def ranks_text(ranks: list[int]) -> str:
    """"rank 1", or "ranks 0, 2": ranks named in a message."""
    return f"rank{'s' * (len(ranks) > 1)} {', '.join(map(str, ranks))}"


def hang_message(call_id: str, world_size: int, what: str, seconds: float) -> str:
    notes = hang_watch.read_notes(call_id, world_size)
    left = [r for r in range(world_size) if any("left" in n for n in notes[r])]
    stuck = [r for r in range(world_size) if r not in left]
    if left:
        return (f"hang: rank(s) {stuck} waited in a collective that rank(s) {left} never "
                f"called ({'they' if len(left) > 1 else 'it'} returned from {what} without "
                f"it); stopped after {seconds:.1f} s. Every rank must call every collective, "
                "in the same order.")
    return (f"hang: every rank (of {world_size}) was still inside {what} after {seconds:.1f} s; "
            "the ranks called different collectives, or in different orders.")


def compare_grads(got: list[dict], want: dict, hints: dict, where: str,
                  rtol: float = 1e-4, atol: float = 1e-6) -> str | None:
    """None when every rank's gradients (``got[rank][name]``) equal ``want[name]``; else what
    differs, having looked at every parameter on every rank first: one factor shared by all
    the wrong gradients (``hints``: factor -> words), a gradient that is another parameter's
    right one, ranks that ended with different gradients, or the first difference."""
    wrong = []  # (rank, name, factor or None)
    for rank, grads in enumerate(got):
        for name, expected in want.items():
            actual = grads.get(name)
            if actual is None:
                return f"{where}: parameter {name!r} has no gradient on rank {rank}."
            if not np.allclose(actual, expected, rtol=rtol, atol=atol):
                wrong.append((rank, name, scale_of(actual, expected)))
    if not wrong:
        return None
    factors = [factor for _, _, factor in wrong]
    if None not in factors and np.allclose(factors, factors[0], rtol=1e-3):
        return _one_factor(wrong, want, len(got), hints, where)
    for rank, name, _ in wrong:  # a gradient that landed on the wrong parameter
        other = next((o for o, right in want.items() if o != name and np.shape(right) ==
                      np.shape(got[rank][name]) and np.allclose(got[rank][name], right,
                                                                rtol=rtol, atol=atol)), None)
        if other is not None:
            return (f"{where}: the gradient of {name!r} on rank {rank} is the right gradient of "
                    f"{other!r}: {name!r} received the gradient of {other!r}. Copy each "
                    "parameter's slice of the bucket back from the offset it was flattened "
                    "to, in the same order.")
    rank, name, factor = wrong[0]
    head = f"{where}: the gradient of {name!r} on rank {rank} "
    if factor is not None:
        return f"{head}is {factor:.3g} times the right one{_hint(factor, hints)}"
    others = [r for r in range(len(got)) if not np.allclose(
        got[r][name], got[rank][name], rtol=rtol, atol=atol)]
    if others:
        return (f"{head}differs from rank {others[0]}'s: the ranks ended with different "
                "gradients, where every rank must hold the same average (a rank left out of "
                "an all-reduce, or a gradient changed on one rank after its all-reduce, ends "
                "like this).")
    error = float(np.max(np.abs(got[rank][name] - want[name])))
    return f"{head}differs from the right one by up to {error:.3g}."


def _one_factor(wrong, want, world_size: int, hints: dict, where: str) -> str:
    """Every wrong gradient is ``factor`` times the right one: say which, and what it means."""
    factor = wrong[0][2]
    words = _hint(factor, hints)
    if len(wrong) == len(want) * world_size:
        return f"{where}: every gradient, on every rank, is {factor:.3g} times the right one{words}"
    names = sorted({name for _, name, _ in wrong}, key=list(want).index)
    right = [n for n in want if n not in names]
    ranks = sorted({rank for rank, _, _ in wrong})
    on = "every rank" if len(ranks) == world_size else ranks_text(ranks)
    return (f"{where}: the gradients of {', '.join(map(repr, names))} on {on} are "
            f"{factor:.3g} times the right ones"
            + (f" (those of {', '.join(map(repr, right))} are right)" if right else "") + words)


def _hint(factor: float, hints: dict) -> str:
    for value, words in hints.items():
        if np.isclose(factor, value, rtol=1e-3):
            return f": {words}"
    return "."


def scale_of(actual, expected) -> float | None:
    """The factor ``f`` with ``actual == f * expected``, if there is one."""
    norm = float(np.dot(expected.ravel(), expected.ravel()))
    if norm == 0.0:
        return None
    factor = float(np.dot(actual.ravel(), expected.ravel())) / norm
    if np.allclose(actual, factor * expected, rtol=1e-4, atol=1e-7):
        return factor
    return None


SOLUTION_MODULE = "ddplab_solution"


def load_solution(path: str, name: str):
    """The object called ``name`` that the file at ``path`` defines, loaded as Python imports a
    module (``importlib.util.spec_from_file_location`` + ``module_from_spec``): the file's own
    ``from __future__`` imports only (``compile`` inside this module would pass on its
    ``annotations`` flag), and its module registered in ``sys.modules`` while it runs, since
    ``@dataclass`` looks its class's module up there (``dataclasses._is_type``: ``sys.modules
    .get(cls.__module__).__dict__``). Afterwards the module is taken out of ``sys.modules``
    again, so no process can import it by name and ``ddplab.run`` ships its functions and
    classes by value (cloudpickle pickles by reference only what it can import)."""
    if not os.path.isfile(path):
        raise Unusable(f"cannot read {path}: no such file")
    spec = importlib.util.spec_from_file_location(SOLUTION_MODULE, path,
                                                  loader=_SourceLoader(SOLUTION_MODULE, path))
    module = importlib.util.module_from_spec(spec)
    before = sys.modules.get(SOLUTION_MODULE)
    sys.modules[SOLUTION_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise Unusable(f"{path}, line {exc.lineno}: syntax error: {exc.msg}") from None
    except OSError as exc:
        raise Unusable(f"cannot read {path}: {exc}") from None
    except Exception as exc:
        raise Unusable(f"{path} raised while loading: {type(exc).__name__}: {exc}") from None
    finally:
        if before is None:
            sys.modules.pop(SOLUTION_MODULE, None)
        else:
            sys.modules[SOLUTION_MODULE] = before
    namespace = vars(module)
    if name not in namespace:
        defined = sorted(k for k, v in namespace.items() if callable(v) and not k.startswith("_")
                         and getattr(v, "__module__", None) == SOLUTION_MODULE)
        raise Unusable(f"{path} defines no {name!r} (it defines: {', '.join(defined) or 'none'})")
    return namespace[name]


class _SourceLoader(importlib.machinery.SourceFileLoader):
    """A file of any name (``mine.txt`` too) read as Python source, never from or into a
    ``__pycache__`` (a reader's folder is left as it was)."""

    def get_code(self, fullname):
        return self.source_to_code(self.get_data(self.path), self.path)
