"""The public API: run a function on every rank of a real process group, and its checks.

    import ddplab
    results = ddplab.run(fn, world_size=4, **params)      # the shared warm pool
    with ddplab.Cluster(world_size=4) as cluster:
        results = cluster.run(fn, **params)               # a pool of its own, closed on exit

``fn(ctx, **params)`` is a top-level function of an importable module; it runs on every rank
(see :mod:`.rank`) and the call returns its results as a list ordered by rank. Bad input
is rejected here, in the caller, before any rank process is started or asked.

Where the ranks come from: the local warm pool (:mod:`ddplab.engine.pool`, its processes forked by
:mod:`ddplab.engine.forkserver`), or, in a process started by torchrun, the torchrun group itself
(:mod:`ddplab.engine.torchrun`), so experiments run unchanged on a cluster.
"""

from __future__ import annotations

import importlib
import inspect
import multiprocessing
import pickle

from ddplab.engine import pool, torchrun
from ddplab.engine.backend import BACKENDS
from ddplab.engine.errors import GUARD_HINT, RankError
from ddplab.engine.forkserver import prestart
from ddplab.engine.pool import MAX_WORLD_SIZE

DEFAULT_TIMEOUT = 60.0

__all__ = ["BACKENDS", "Cluster", "DEFAULT_TIMEOUT", "MAX_WORLD_SIZE", "RankError", "logs",
           "prestart", "run"]


def run(fn, world_size: int, *, backend: str = "auto", timeout: float = DEFAULT_TIMEOUT,
        **params) -> list:
    """Run ``fn(ctx, **params)`` on ``world_size`` ranks of the shared warm pool.

    Under torchrun, run it in this process on the torchrun group instead (``world_size`` must
    then be torchrun's, or None). Returns one result per rank, ordered by rank.
    """
    if torchrun.under_torchrun():
        if world_size is None:
            world_size = torchrun.launched_world_size()
        check_call(fn, world_size, backend, timeout, params)
        return torchrun.run(fn, world_size, backend, timeout, params)
    check_call(fn, world_size, backend, timeout, params)
    return pool.shared().run(fn, world_size, backend, timeout, params)


def logs() -> list[str]:
    """What each rank of the shared pool has written (stdout, stderr, warnings), by rank."""
    return pool.shared_logs()


class Cluster:
    """A pool of ``world_size`` rank processes of its own; ``close()`` (or ``with``) ends them."""

    def __init__(self, world_size: int, backend: str = "auto", timeout: float = DEFAULT_TIMEOUT):
        check_call(None, world_size, backend, timeout, {})
        self.world_size = world_size
        self.timeout = timeout
        self._pool = pool.Pool()
        try:
            self.backend = self._pool.start(world_size, backend, timeout)
        except BaseException:
            self._pool.close()
            raise

    def run(self, fn, **params) -> list:
        """Run ``fn(ctx, **params)`` on every rank; one result per rank, ordered by rank."""
        if self._pool is None:
            raise RuntimeError("this Cluster is closed; make a new one")
        check_call(fn, self.world_size, self.backend, self.timeout, params)
        return self._pool.run(fn, self.world_size, self.backend, self.timeout, params)

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
        state = "closed" if self._pool is None else f"backend={self.backend!r}"
        return f"Cluster(world_size={self.world_size}, {state})"


def check_call(fn, world_size, backend, timeout, params) -> None:
    """Reject bad input in the caller, before any rank process is started or asked."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) \
            or not 1 <= world_size <= MAX_WORLD_SIZE:
        raise ValueError(f"world_size must be an int from 1 to {MAX_WORLD_SIZE}, "
                         f"got {world_size!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError("ddplab was called while a rank process was starting. " + GUARD_HINT)
    if fn is not None:
        check_fn(fn, params)


def check_fn(fn, params) -> None:
    """``fn`` must be importable by name in a fresh process and take ``params``."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not callable(fn) or not module or not qualname:
        raise TypeError(f"fn must be a function defined at the top level of a module, got {fn!r}")
    name = f"{module}.{qualname}"
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise ValueError(f"{name} is a lambda or is defined inside another function; rank "
                         "processes can only import functions defined at the top level of a "
                         "module")
    if module == "__main__" and pool.main_path() is None:
        raise ValueError(
            f"{qualname} is defined in a notebook cell or an interactive session, so the rank "
            "processes, which start fresh, cannot import it (pytorch#20375). Move it into a .py "
            "module (for example my_experiment.py beside the notebook) and import it from there.")
    if module != "__main__":
        try:
            found = importlib.import_module(module)
            for part in qualname.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"rank processes cannot import {name}: {exc}") from None
        if found is not fn:
            raise ValueError(f"{name} names another object than the fn given (was it redefined "
                             "or wrapped?); rank processes would run that other object")
    try:
        inspect.signature(fn).bind(None, **params)
    except TypeError as exc:
        raise TypeError(f"{name}(ctx, **params) does not take these parameters: {exc}") from None
    try:
        pickle.dumps(params)
    except Exception as exc:
        raise TypeError(f"parameters must be picklable to reach the ranks: {exc}") from None
