"""The public API: run a function on every rank of a real process group, and its checks.

    import ddplab
    results = ddplab.run(fn, world_size=4, **params)      # the shared warm pool
    with ddplab.Cluster(world_size=4) as cluster:
        results = cluster.run(fn, **params)               # a pool of its own, closed on exit

``fn(ctx, **params)`` runs on every rank (see :mod:`.rank`) and the call returns its results
as a list ordered by rank (a :class:`~ddplab.engine.placement.Ranks`, which also carries the
placement, ``.backend`` and ``.device``, the ranks ran on). Where they run is the process's
placement (:func:`ddplab.placed`, :func:`ddplab.placement`; :mod:`ddplab.engine.placement`), not
a parameter of each call. Bad input is rejected here, in the caller, before any rank process is
started or asked.

How ``fn`` reaches the ranks (:func:`ship`): pickled once per call by ``cloudpickle``, which
pickles a function of an importable module by reference (its name, as ``pickle`` does) and
anything else by value: a function or class defined in a notebook cell, in the ``__main__`` of
a script (a file, or read from standard input), a lambda or a nested function, with the
globals it uses (helpers, constants, classes of the same cell). Rank processes start fresh and
cannot import a kernel's ``__main__`` (pytorch#20375); by value they need not. This is how Dask,
Ray and PySpark ship notebook functions to their workers. What is refused, and why: what is not
callable; a call whose parameters ``fn`` does not take; and what no pickler can send to another
process (a lock, an open file, a socket, a generator in the closure, the globals or the
parameters), named in the error.

Where the ranks come from: the local warm pool (:mod:`ddplab.engine.pool`, its processes forked by
:mod:`ddplab.engine.forkserver`), or, in a process started by torchrun, the torchrun group itself
(:mod:`ddplab.engine.torchrun`), so experiments run unchanged on a cluster.
"""

from __future__ import annotations

import inspect
import multiprocessing
import pickle
import types

import cloudpickle

from ddplab.engine import messages, placement, pool, torchrun, turns
from ddplab.engine.errors import GUARD_HINT, RankError
from ddplab.engine.placement import MAX_WORLD_SIZE, Placement, Ranks, placed

DEFAULT_TIMEOUT = 60.0

__all__ = ["Cluster", "DEFAULT_TIMEOUT", "MAX_WORLD_SIZE", "Placement", "RankError", "Ranks",
           "logs", "placed", "run"]


def run(fn, world_size: int, *, timeout: float = DEFAULT_TIMEOUT, **params) -> Ranks:
    """Run ``fn(ctx, **params)`` on ``world_size`` ranks of the shared warm pool, on this
    process's placement (:func:`ddplab.placed`).

    Under torchrun, run it in this process on the torchrun group instead (``world_size`` must
    then be torchrun's, or None). Returns one result per rank, ordered by rank, with the
    placement they ran on (``.backend``, ``.device``).
    """
    if torchrun.under_torchrun():
        if world_size is None:
            world_size = torchrun.launched_world_size()
        check_call(fn, world_size, timeout, params)
        where = placement.serving(world_size)
        return Ranks(torchrun.run(fn, world_size, where, timeout, params), where)
    check_call(fn, world_size, timeout, params)
    where = placement.serving(world_size)
    with turns.call():  # work computed ahead gives way to any other call (engine.turns)
        return pool.shared().run(ship(fn, params), world_size, where, timeout)


def logs() -> list[str]:
    """What each rank of the shared pool has written (stdout, stderr, warnings), by rank."""
    return pool.shared_logs()


class Cluster:
    """A pool of ``world_size`` rank processes of its own, on the process's placement as it is
    when the cluster is made (``.placement``, ``.backend``, ``.device``), kept for its life;
    ``close()`` (or ``with``) ends them."""

    def __init__(self, world_size: int, timeout: float = DEFAULT_TIMEOUT):
        check_call(None, world_size, timeout, {})
        self.world_size = world_size
        self.timeout = timeout
        self.placement = placement.serving(world_size)
        self._pool = pool.Pool()
        try:
            self._pool.start(world_size, self.placement, timeout)
        except BaseException:
            self._pool.close()
            raise
        self.backend, self.device = self.placement.backend, self.placement.device

    def run(self, fn, **params) -> list:
        """Run ``fn(ctx, **params)`` on every rank; one result per rank, ordered by rank."""
        if self._pool is None:
            raise RuntimeError("this Cluster is closed; make a new one")
        check_call(fn, self.world_size, self.timeout, params)
        return self._pool.run(ship(fn, params), self.world_size, self.placement, self.timeout)

    def logs(self) -> list[str]:
        """What each rank has written (stdout, stderr, warnings), by rank."""
        return self._pool.logs() if self._pool is not None else []

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self._pool is None else \
            f"backend={self.backend!r}, device={self.device!r}"
        return f"Cluster(world_size={self.world_size}, {state})"


def check_call(fn, world_size, timeout, params) -> None:
    """Reject bad input in the caller, before any rank process is started or asked (what the
    machine cannot serve, e.g. NCCL with more ranks than GPUs, is the placement's to refuse,
    just as early: ``placement.serving``)."""
    placement.check_world_size("world_size", world_size)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError("ddplab was called while a rank process was starting. " + GUARD_HINT)
    if fn is not None:
        check_fn(fn, params)


def check_fn(fn, params) -> None:
    """``fn`` must be callable and take ``params``."""
    if not callable(fn):
        raise TypeError(f"fn must be a function (or class), got {fn!r}")
    try:
        inspect.signature(fn).bind(None, **params)
    except TypeError as exc:
        raise TypeError(f"{describe(fn)}(ctx, **params) does not take these parameters: "
                        f"{exc}") from None
    except ValueError:  # a builtin without a signature: the call itself will tell
        pass


def ship(fn, params) -> messages.Shipped:
    """``(fn, params)`` pickled once for every rank (see the module's docstring); what cannot
    be pickled is a ``TypeError`` here that names it, before any rank is asked."""
    try:
        payload = cloudpickle.dumps((fn, params), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise TypeError(f"{describe(fn)} cannot be sent to the rank processes: "
                        f"{unpicklable_part(fn, params) or exc}") from None
    return messages.Shipped(describe(fn), payload)


def describe(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def unpicklable_part(fn, params) -> str | None:
    """Which part of the call cannot be pickled: a closure variable, a global ``fn`` uses, a
    default, a class attribute or a parameter, by name."""
    parts = [(f"the parameter {k!r}", v) for k, v in params.items()]
    function = fn.__call__ if isinstance(fn, type) and "__call__" in vars(fn) else fn
    code = getattr(function, "__code__", None)
    if code is not None:
        for var, cell in zip(code.co_freevars, function.__closure__ or ()):
            try:
                parts.append((f"the variable {var!r} in its closure", cell.cell_contents))
            except ValueError:  # an empty cell
                pass
        used = global_names(code)
        parts += [(f"the global {n!r} it uses", v)
                  for n, v in getattr(function, "__globals__", {}).items() if n in used]
        parts += [("a default argument", v) for v in (function.__defaults__ or ())]
    if isinstance(fn, type):
        parts += [(f"the class attribute {n!r}", v) for n, v in vars(fn).items()
                  if not n.startswith("__")]
    for what, value in parts:
        try:
            cloudpickle.dumps(value)
        except Exception as exc:
            return f"{what} is a {type(value).__name__}, which cannot be pickled ({exc})"
    return None


def global_names(code: types.CodeType) -> set[str]:
    """The global names ``code`` and the functions nested in it refer to."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return names
