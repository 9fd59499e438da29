"""Real torch.distributed process groups, started from a notebook and kept warm between calls.

    import ddplab
    results = ddplab.run(fn, world_size=4, **params)      # the shared warm pool
    with ddplab.Cluster(world_size=4) as cluster:
        results = cluster.run(fn, **params)               # a pool of its own, closed on exit

``fn(ctx, **params)`` is a top-level function of an importable module; it runs on every rank
(see :mod:`ddplab.rank`) and the call returns its results as a list ordered by rank.

How the local pool works (measurements in ARCHITECTURE.md):

* Rank processes are forked by multiprocessing's forkserver, which has imported torch once
  (``set_forkserver_preload``), and they stay alive across calls. The kernel itself is never
  forked: fork after torch work in the parent can hang the child (pytorch#41197).
* The kernel owns one TCPStore on a socket it bound to 127.0.0.1 itself (``TCPStore("127.0.0.1",
  ...)`` alone would listen on every interface). Each new group ("generation") uses a fresh key
  prefix of that store. A group is kept while world size and backend stay the same.
* Any failure (a rank raises, dies, hangs past the timeout, or the caller is interrupted) ends
  every rank process of the pool; the next call starts fresh ones. Half-broken groups are never
  reused, and a respawn from the warm forkserver costs a fraction of a second.

Under ``torchrun`` the same ``run(fn, ...)`` runs ``fn`` in the calling process on the env://
group and returns every rank's result to every rank, so experiments run unchanged on a cluster.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import importlib
import inspect
import multiprocessing
import multiprocessing.connection
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time

MAX_WORLD_SIZE = 64
DEFAULT_TIMEOUT = 60.0
BACKENDS = ("auto", "gloo", "nccl")
ERROR_GRACE = 0.25  # seconds to collect other ranks' errors after the first, before ending them

GUARD_HINT = (
    "If you started ddplab from a script, the script's top level runs again in every rank "
    "process: put it under `if __name__ == \"__main__\":`."
)


class RankError(RuntimeError):
    """A rank raised or died. The message names the rank and carries its traceback."""

    def __init__(self, message: str, rank: int, remote_traceback: str = ""):
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback


# ---------------------------------------------------------------------------- public API


def run(fn, world_size: int, *, backend: str = "auto", timeout: float = DEFAULT_TIMEOUT,
        **params) -> list:
    """Run ``fn(ctx, **params)`` on ``world_size`` ranks of the shared warm pool.

    Under torchrun, run it in this process on the torchrun group instead (``world_size`` must
    then be torchrun's). Returns one result per rank, ordered by rank.
    """
    if under_torchrun():
        return _run_under_torchrun(fn, world_size, backend, timeout, params)
    _check_call(fn, world_size, backend, timeout, params)
    return _shared_pool().run(fn, world_size, backend, timeout, params)


def logs() -> list[str]:
    """What each rank of the shared pool has written (stdout, stderr, warnings), by rank."""
    return _shared.logs() if _shared is not None else []


class Cluster:
    """A pool of ``world_size`` rank processes of its own; ``close()`` (or ``with``) ends them."""

    def __init__(self, world_size: int, backend: str = "auto", timeout: float = DEFAULT_TIMEOUT):
        _check_call(None, world_size, backend, timeout, {})
        self.world_size = world_size
        self.timeout = timeout
        self._pool = _Pool()
        try:
            self.backend = self._pool.start(world_size, backend, timeout)
        except BaseException:
            self._pool.close()
            raise

    def run(self, fn, **params) -> list:
        """Run ``fn(ctx, **params)`` on every rank; one result per rank, ordered by rank."""
        if self._pool is None:
            raise RuntimeError("this Cluster is closed; make a new one")
        _check_call(fn, self.world_size, self.backend, self.timeout, params)
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


# ---------------------------------------------------------------------------- checks


def _check_call(fn, world_size, backend, timeout, params) -> None:
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
        _check_fn(fn, params)


def _check_fn(fn, params) -> None:
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not callable(fn) or not module or not qualname:
        raise TypeError(f"fn must be a function defined at the top level of a module, got {fn!r}")
    name = f"{module}.{qualname}"
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise ValueError(f"{name} is a lambda or is defined inside another function; rank "
                         "processes can only import functions defined at the top level of a "
                         "module")
    if module == "__main__" and _main_path() is None:
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


def resolve_backend(backend: str, ranks_per_host: int) -> str:
    """``nccl`` only with one GPU per rank (NCCL refuses two ranks on one GPU), else ``gloo``."""
    import torch

    gpus = torch.cuda.device_count()
    if backend == "nccl" and gpus < ranks_per_host:
        raise ValueError(f"backend 'nccl' needs one GPU per rank: {ranks_per_host} ranks, "
                         f"{gpus} GPU(s) visible. Use backend='gloo' (or 'auto').")
    if backend == "auto":
        return "nccl" if gpus >= ranks_per_host else "gloo"
    return backend


# ---------------------------------------------------------------------------- the local pool


class _Worker:
    def __init__(self, slot, process, conn):
        self.slot, self.process, self.conn = slot, process, conn


class _Pool:
    """Rank processes of one machine; grows to the largest world size asked for."""

    def __init__(self):
        self._lock = threading.RLock()
        self._workers: list[_Worker] = []
        self._group = None  # (world_size, backend) of the group formed by the first workers
        self._generation = 0
        self._store = None
        self._port = None
        self._logdir = None
        self._mp = None

    def start(self, world_size: int, backend: str, timeout: float) -> str:
        with self._lock:
            self._start_store()
            backend = resolve_backend(backend, world_size)
            self._grow(world_size, backend, timeout)
            return backend

    def run(self, fn, world_size, backend, timeout, params) -> list:
        with self._lock:
            self._start_store()
            backend = resolve_backend(backend, world_size)
            if any(_died_idle(w) for w in self._workers):
                self._end_workers()  # one died between calls: its group cannot be trusted
            self._grow(world_size, backend, timeout)
            active = self._workers[:world_size]
            try:
                if self._group != (world_size, backend):  # a new group: a new generation
                    self._generation += 1
                    self._group = (world_size, backend)
                    for worker in self._workers[world_size:]:
                        worker.conn.send_bytes(pickle.dumps(("leave",)))
                message = pickle.dumps(("run", self._generation, world_size, backend, timeout,
                                        fn, params))
                for worker in active:
                    worker.conn.send_bytes(message)
                return self._collect(active, timeout)
            except BaseException:  # a rank failed, or the caller was interrupted
                self._end_workers()
                raise

    def logs(self) -> list[str]:
        """Every rank's log, by rank; a log outlives its process (read it after a failure)."""
        with self._lock:
            if self._logdir is None:
                return []
            slots = [int(name[4:-4]) for name in os.listdir(self._logdir)
                     if name.startswith("rank") and name.endswith(".log")]
            return [_read(self._log_path(slot)) for slot in range(max(slots, default=-1) + 1)]

    def close(self) -> None:
        with self._lock:
            self._end_workers(graceful=True)
            self._store = None  # the store closes its listening socket
            if self._logdir is not None:
                shutil.rmtree(self._logdir, ignore_errors=True)
                self._logdir = None

    # -- internals

    def _start_store(self) -> None:
        if self._store is not None:
            return
        self._mp = _process_context()
        import torch.distributed as dist

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))
            sock.listen(MAX_WORLD_SIZE * 2)
            self._port = sock.getsockname()[1]
            # The store takes the socket over and closes it itself when it is destroyed.
            self._store = dist.TCPStore("127.0.0.1", self._port, is_master=True,
                                        wait_for_workers=False, master_listen_fd=sock.fileno(),
                                        use_libuv=True)
            sock.detach()
        finally:
            sock.close()
        self._logdir = tempfile.mkdtemp(prefix="ddplab-logs-")

    def _grow(self, world_size: int, backend: str, timeout: float) -> None:
        if self._group is not None and self._group != (world_size, backend) \
                and "nccl" in (backend, self._group[1]):
            # NCCL groups are not re-formed inside live processes (destroy/re-init races,
            # pytorch#119196): start fresh ones.
            self._end_workers(graceful=True)
        new = []
        try:
            for slot in range(len(self._workers), world_size):
                parent_conn, child_conn = self._mp.Pipe()
                process = self._mp.Process(
                    target=_worker_main, name=f"ddplab-rank-{slot}", daemon=True,
                    args=(child_conn, slot, self._port, self._log_path(slot)))
                with _main_file_hidden_if_missing():
                    process.start()
                child_conn.close()
                new.append(_Worker(slot, process, parent_conn))
                self._workers.append(new[-1])
            if new:
                self._group = None
                self._collect(new, timeout, starting=True)
        except BaseException:
            self._end_workers()
            raise

    def _collect(self, workers: list[_Worker], timeout: float, starting=False) -> list:
        """One reply from each worker, by rank; raise if a rank raised, died or timed out."""
        pending = {w.slot: w for w in workers}
        replies, errors = {}, {}
        deadline = time.monotonic() + timeout
        while pending:
            waitables = {}
            for w in pending.values():
                waitables[w.conn] = w
                waitables[w.process.sentinel] = w
            ready = multiprocessing.connection.wait(list(waitables),
                                                    max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            for worker in {waitables[r].slot: waitables[r] for r in ready}.values():
                del pending[worker.slot]
                try:
                    if not worker.conn.poll():
                        raise EOFError
                    kind, *payload = pickle.loads(worker.conn.recv_bytes())
                except (EOFError, OSError):
                    raise self._died(worker, starting) from None
                if kind == "error":
                    errors[worker.slot] = payload
                    deadline = min(deadline, time.monotonic() + ERROR_GRACE)
                else:
                    replies[worker.slot] = payload[0]
        if errors:
            rank = min(errors)
            summary, remote_traceback = errors[rank]
            others = sorted(set(errors) - {rank})
            also = f" (ranks {others} raised too)" if others else ""
            raise RankError(f"{summary}{also}\n\nTraceback from rank {rank}:\n"
                            f"{remote_traceback}", rank, remote_traceback)
        if pending:
            what = "started" if starting else "answered"
            raise TimeoutError(f"rank(s) {sorted(pending)} had not {what} after {timeout:g} s; "
                               "the pool's processes were ended and start afresh on the next "
                               "call. Pass a larger timeout for longer runs.")
        return [replies[w.slot] for w in workers]

    def _died(self, worker: _Worker, starting: bool) -> RankError:
        worker.process.join(1.0)
        code = worker.process.exitcode
        if code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        else:
            how = f"exited with code {code}"
        when = "while starting" if starting else "during the call"
        tail = _read(self._log_path(worker.slot))[-2000:]
        hint = f" {GUARD_HINT}" if starting and _main_path() else ""
        log = f"\nIts log ends with:\n{tail}" if tail.strip() else ""
        return RankError(f"rank {worker.slot} (pid {worker.process.pid}) {how} {when}; the "
                         f"pool starts afresh on the next call.{hint}{log}", worker.slot)

    def _end_workers(self, graceful: bool = False) -> None:
        """End every rank process and forget the group; later calls start fresh ones."""
        for w in self._workers:
            if graceful:
                try:
                    w.conn.send_bytes(pickle.dumps(("stop",)))
                except OSError:
                    pass
            else:
                w.process.kill()
        deadline = time.monotonic() + 5.0
        for w in self._workers:
            w.process.join(max(0.0, deadline - time.monotonic()))
            if w.process.exitcode is None:
                w.process.kill()
                w.process.join()
            w.conn.close()
        self._workers = []
        self._group = None

    def _log_path(self, slot: int) -> str:
        return os.path.join(self._logdir, f"rank{slot}.log")


def _died_idle(worker: _Worker) -> bool:
    """Whether an idle rank is gone. An idle rank never writes, so a readable pipe is its end
    (EOF); ``is_alive()`` alone lags until the forkserver has reaped the process."""
    return not worker.process.is_alive() or worker.conn.poll()


def _worker_main(*args) -> None:
    """A rank process's entry point. The kernel never imports ddplab.rank (it would load dynamo
    for nothing); the forkserver has it preloaded, so this import is free in the child."""
    from ddplab.rank import worker_main

    worker_main(*args)


POOL_PROCESS_ENV = "DDPLAB_POOL_PROCESS"  # set in the forkserver and every rank process


def _process_context():
    """forkserver where there is one (Linux, macOS), spawn elsewhere; never fork (see above).

    The forkserver is started here if it is not running yet, marked so that the ``ddplab``
    import inside it (for the preload) does not try to start another one.
    """
    method = os.environ.get("DDPLAB_START_METHOD") or (
        "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn")
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        from multiprocessing import forkserver

        ctx.set_forkserver_preload(["ddplab._preload"])
        with _forkserver_lock:
            saved = os.environ.get(POOL_PROCESS_ENV)
            os.environ[POOL_PROCESS_ENV] = "1"
            try:
                forkserver.ensure_running()
            finally:
                if saved is None:
                    del os.environ[POOL_PROCESS_ENV]
        global _forkserver_started
        if not _forkserver_started:
            _forkserver_started = True
            atexit.register(_end_forkserver)
    return ctx


def prestart() -> None:
    """Start the forkserver now (``import ddplab`` calls this), in the background.

    Its preload (torch, DDP, dynamo) takes 2.4 s here and is the bulk of the first call's
    latency; started at import, it overlaps with the caller's own imports (the first result at
    world size 8 came 1 s sooner, see ARCHITECTURE.md). Only in a top-level process: not in a
    rank, not in the forkserver itself, not under torchrun; ``DDPLAB_PRESTART=0`` turns it off.
    """
    if (os.environ.get("DDPLAB_PRESTART", "1") != "0"
            and POOL_PROCESS_ENV not in os.environ
            and multiprocessing.parent_process() is None
            and not getattr(multiprocessing.current_process(), "_inheriting", False)
            and not under_torchrun()
            and (os.environ.get("DDPLAB_START_METHOD") or "forkserver") == "forkserver"
            and "forkserver" in multiprocessing.get_all_start_methods()):
        _process_context()


def _end_forkserver() -> None:
    """At exit, end the forkserver we started, even mid-preload, so nothing outlives us.

    (Left alone it would exit by itself, but only once its 2.4 s preload is over.)
    """
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


_forkserver_lock = threading.Lock()
_forkserver_started = False


def _main_path() -> str | None:
    """The file of ``__main__`` if it has one that exists (a script), else None (a notebook,
    ``python -c``, a script read from standard input: ``__file__ == "<stdin>"``)."""
    path = getattr(sys.modules["__main__"], "__file__", None)
    return path if path and os.path.exists(path) else None


@contextlib.contextmanager
def _main_file_hidden_if_missing():
    """Multiprocessing re-imports ``__main__`` by its ``__file__`` in every child; for a script
    read from standard input that file does not exist and every rank would die starting."""
    main = sys.modules["__main__"]
    path = getattr(main, "__file__", None)
    if path is None or _main_path() is not None or getattr(main, "__spec__", None) is not None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


_shared: _Pool | None = None
_shared_lock = threading.Lock()


def _shared_pool() -> _Pool:
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = _Pool()
            atexit.register(_shared.close)
        return _shared


# ---------------------------------------------------------------------------- torchrun


def under_torchrun() -> bool:
    """True in a process started by torchrun (or another env:// launcher)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def is_reporting_process() -> bool:
    """Whether this process should print reports: always, except on ranks > 0 under torchrun."""
    return not under_torchrun() or os.environ["RANK"] == "0"


def _run_under_torchrun(fn, world_size, backend, timeout, params) -> list:
    import torch.distributed as dist

    from ddplab.rank import RankContext, device_for, plain

    env_world_size = int(os.environ["WORLD_SIZE"])
    if world_size is None:
        world_size = env_world_size
    _check_call(fn, world_size, backend, timeout, params)
    if world_size != env_world_size:
        raise ValueError(f"world_size={world_size} asked for, but torchrun started "
                         f"{env_world_size} processes")
    local_rank = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
    ranks_per_host = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    backend = resolve_backend(backend, ranks_per_host)
    device = device_for(backend, local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
        atexit.register(dist.destroy_process_group)
    ctx = RankContext(rank=dist.get_rank(), world_size=world_size, local_rank=local_rank,
                      device=device, backend=backend, host=socket.gethostname())
    result = plain(fn(ctx, **params))
    results = [None] * world_size
    dist.all_gather_object(results, result)
    return results
