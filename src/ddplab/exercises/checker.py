"""Running a reader's solution on real ranks, one case per call, and saying what went wrong.

* :func:`run_case` calls ``ddplab.run(on_rank, world_size, timeout=...)`` for one case. Every rank
  notes in its log (``hang_watch.note``) when it enters and leaves the reader's code, so when a
  collective only some ranks call hangs, the caller's timeout ends every rank (the pool starts
  fresh ones on the next call) and the notes say which ranks waited and which never came.
* The checker's own rank code calls no collective after the reader's: each rank returns its
  gradients and the caller compares them, so a missing collective cannot pair with one of ours.
* A hang or a raise comes back with every rank's notes: an exercise's ``explain`` may put
  what they show (the collectives a rank started, say) into words.
* :func:`watching` lets an exercise see each call of the process group's methods that the
  reader's code makes (:func:`watching_allreduce`: each all-reduce it starts).
* :func:`compare_grads` says which parameter differs, on which rank, and by what factor.
* :func:`load_solution` reads a ``.py`` file for the command line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid

import numpy as np
import torch.distributed as dist

import ddplab
from ddplab.engine import hang_watch


class Unusable(ValueError):
    """The solution file cannot be used: a syntax error, or the named function is missing."""


@dataclasses.dataclass
class Verdict:
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
            problem = f"{what} raised on rank {exc.rank}: {summary}"
    return Outcome(None, problem, hang_watch.read_notes(call_id, world_size))


def enter(call_id: str, rank: int) -> None:
    hang_watch.note(call_id, rank, entered=True)


def leave(call_id: str, rank: int) -> None:
    hang_watch.note(call_id, rank, left=True)


@contextlib.contextmanager
def watching(see, *methods: str):
    """Inside the block, every call of the ``ProcessGroup`` methods named (``allreduce``, which
    ``dist.all_reduce`` calls; ``send``, which ``dist.send``, ``dist.isend`` and
    ``dist.batch_isend_irecv`` call) first calls ``see(method, *args, **kwargs)``, then the
    method. Each class entry (a pybind11 instancemethod) is put back afterwards: the attribute
    read through the class is a plain builtin that would no longer bind ``self``."""
    entries = {method: dist.ProcessGroup.__dict__[method] for method in methods}

    def spy_on(method):
        call = getattr(dist.ProcessGroup, method)

        def spy(group, *args, **kwargs):
            see(method, *args, **kwargs)
            return call(group, *args, **kwargs)

        return spy

    for method in methods:
        setattr(dist.ProcessGroup, method, spy_on(method))
    try:
        yield
    finally:
        for method, entry in entries.items():
            setattr(dist.ProcessGroup, method, entry)


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
    """None when every rank's gradients (``got[rank][name]``) equal ``want[name]``; else which
    parameter on which rank differs, by what factor, and the hint for that factor if any
    (``hints``: factor -> words)."""
    for rank, grads in enumerate(got):
        for name, expected in want.items():
            actual = grads.get(name)
            if actual is None:
                return f"{where}: parameter {name!r} has no gradient on rank {rank}."
            if np.allclose(actual, expected, rtol=rtol, atol=atol):
                continue
            head = f"{where}: the gradient of {name!r} on rank {rank} "
            others = [r for r in range(len(got)) if not np.allclose(
                got[r][name], actual, rtol=rtol, atol=atol)]
            factor = scale_of(actual, expected)
            if factor is not None:
                for value, words in hints.items():
                    if np.isclose(factor, value, rtol=1e-3):
                        return f"{head}is {factor:.3g} times the right one: {words}"
                return f"{head}is {factor:.3g} times the right one."
            if others:
                return (f"{head}differs from rank {others[0]}'s: the ranks did not end with the "
                        "same gradient, so they did not all take part in the average.")
            error = float(np.max(np.abs(actual - expected)))
            return f"{head}differs from the right one by up to {error:.3g}."
    return None


def scale_of(actual, expected) -> float | None:
    """The factor ``f`` with ``actual == f * expected``, if there is one."""
    norm = float(np.dot(expected.ravel(), expected.ravel()))
    if norm == 0.0:
        return None
    factor = float(np.dot(actual.ravel(), expected.ravel())) / norm
    if np.allclose(actual, factor * expected, rtol=1e-4, atol=1e-7):
        return factor
    return None


def load_solution(path: str, name: str):
    """The object called ``name`` that the file at ``path`` defines. Its functions are named
    as a module that no process can import, so that ``ddplab.run`` ships them by value."""
    try:
        with open(path) as handle:
            source = handle.read()
    except OSError as exc:
        raise Unusable(f"cannot read {path}: {exc}") from None
    try:
        code = compile(source, path, "exec")
    except SyntaxError as exc:
        raise Unusable(f"{path}, line {exc.lineno}: syntax error: {exc.msg}") from None
    namespace = {"__name__": "ddplab_solution", "__file__": path}
    try:
        exec(code, namespace)
    except Exception as exc:
        raise Unusable(f"{path} raised while loading: {type(exc).__name__}: {exc}") from None
    if name not in namespace:
        defined = sorted(k for k, v in namespace.items() if callable(v) and not k.startswith("_")
                         and getattr(v, "__module__", None) == "ddplab_solution")
        raise Unusable(f"{path} defines no {name!r} (it defines: {', '.join(defined) or 'none'})")
    return namespace[name]
