"""The local warm pool: rank processes of this machine, kept alive and grouped across calls.

* Rank processes come from the forkserver (:mod:`ddplab.engine.forkserver`) and stay alive across
  calls; the pool grows to the largest world size asked for.
* Its rank processes serve one placement (backend and device, :mod:`ddplab.engine.placement`),
  which each learns when it starts; a call on another placement (the process's changed, or a
  ``Cluster``'s is another) gets fresh processes. The pool resolves nothing: the caller hands
  it a placement already resolved.
* The caller owns one TCPStore on a socket it bound to 127.0.0.1 itself (``TCPStore("127.0.0.1",
  ...)`` alone would listen on every interface). Each new group ("generation") uses a fresh key
  prefix of that store. The ranks keep every group they form (:mod:`ddplab.engine.groups`), so
  the pool names one generation per world size and placement it has served, and a move back to
  a size served before forms nothing; ranks beyond a call's world size idle in theirs.
* Any failure (a rank raises, dies, hangs past the timeout, or the caller is interrupted) ends
  every rank process of the pool; fresh ones start in the background (:mod:`.respawn`) or with
  the next call. Half-broken groups are never reused; a respawn costs a fraction of a second.
"""

from __future__ import annotations

import atexit
import multiprocessing.connection
import os
import shutil
import signal
import threading
import time

from ddplab.engine import messages, rank_logs, respawn
from ddplab.engine.errors import GUARD_HINT, RankError
from ddplab.engine.forkserver import main_file_hidden_if_missing, main_path, process_context
from ddplab.engine.loopback import loopback_store
from ddplab.engine.placement import MAX_WORLD_SIZE, Placement, Ranks, needs_fresh_processes

ERROR_GRACE = 0.25  # seconds to collect other ranks' errors after the first, before ending them


class RankProcess:
    """One rank process of the pool and the caller's end of its pipe."""

    def __init__(self, rank, process, conn):
        self.rank, self.process, self.conn = rank, process, conn


class Pool:
    """Rank processes of one machine; grows to the largest world size asked for."""

    def __init__(self):
        self._lock = threading.RLock()
        self._workers: list[RankProcess] = []
        self._placement_of_workers: Placement | None = None  # what they serve, for life
        self._group_size = None  # world size of the last group the workers formed or used
        self._generation = 0
        self._generations = {}  # world size -> the generation its ranks keep
        self._store = None
        self._port = None
        self._logdir = None
        self._mp = None

    def start(self, world_size: int, placement: Placement, timeout: float) -> None:
        """Start ``world_size`` ranks on ``placement`` (resolved and checked by the caller)."""
        with self._lock:
            self._start_store()
            self._grow(world_size, placement, timeout)

    def run(self, fn, world_size: int, placement: Placement, timeout: float,
            params: dict | None = None) -> Ranks:
        """``fn`` on ``world_size`` ranks on ``placement`` (resolved and checked by the caller:
        ``engine.placement.serving``)."""
        with self._lock:
            self._start_store()
            if any(died_idle(w) for w in self._workers):
                self._end_workers()  # one died between calls: its group cannot be trusted
            self._grow(world_size, placement, timeout)
            active = self._workers[:world_size]
            try:
                self._group_size = world_size
                call = messages.Run(self._generation_of(world_size), world_size, timeout, fn,
                                    params or {})
                for worker in active:
                    messages.send(worker.conn, call)
                return Ranks(self._collect(active, timeout), placement)
            except BaseException:  # a rank failed, or the caller was interrupted
                size = len(self._workers)
                self._end_workers()
                respawn.soon(self, size, placement)  # ready before the next call, if it can
                raise

    def logs(self) -> list[str]:
        """Every rank's log, by rank; a log outlives its process (read it after a failure).
        Without the pool's lock, which a call holds: a thread may read the logs of ranks that
        hang in a call (``hang_watch``)."""
        return [rank_logs.read(path) for path in self.log_paths()]

    def log_paths(self) -> list[str]:
        """Every rank's log file, by rank, as :meth:`logs` reads them (without the lock: a
        panel's ticking thread reads where the ranks of a running call are,
        ``screen.while_running``); none before the pool starts or after it closes."""
        logdir = self._logdir
        try:
            names = [] if logdir is None else os.listdir(logdir)
        except FileNotFoundError:  # the pool closed meanwhile
            return []
        ranks = [int(name[4:-4]) for name in names
                 if name.startswith("rank") and name.endswith(".log")]
        return [os.path.join(logdir, f"rank{rank}.log")
                for rank in range(max(ranks, default=-1) + 1)]

    def pids(self) -> list[int]:
        """The process id of each rank process the pool holds, by rank."""
        with self._lock:
            return [w.process.pid for w in self._workers]

    def refill(self, world_size: int, placement: Placement, timeout: float,
               wanted=lambda: True) -> bool:
        """Start ``world_size`` ranks on ``placement`` if the pool holds none, is open, and
        ``wanted()`` still holds once it has the lock; whether it started them. For
        :mod:`.respawn`: a call that came first started its own, ``close`` closed the pool,
        or a later failure asked for other ranks."""
        with self._lock:
            if self._workers or self._store is None or not wanted():
                return False
            self._grow(world_size, placement, timeout)
            return True

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
        self._mp = process_context()
        self._store, self._port = loopback_store(MAX_WORLD_SIZE * 2)
        self._logdir = rank_logs.new_folder()

    def _grow(self, world_size: int, placement: Placement, timeout: float) -> None:
        if self._workers and needs_fresh_processes(self._placement_of_workers,
                                                   self._group_size, world_size, placement):
            self._end_workers(graceful=True)
        self._placement_of_workers = placement
        new = []
        try:
            for rank in range(len(self._workers), world_size):
                parent_conn, child_conn = self._mp.Pipe()
                process = self._mp.Process(
                    target=_worker_main, name=f"ddplab-rank-{rank}", daemon=True,
                    args=(child_conn, rank, self._port, self._log_path(rank), placement))
                with main_file_hidden_if_missing():
                    process.start()
                child_conn.close()
                new.append(RankProcess(rank, process, parent_conn))
                self._workers.append(new[-1])
            if new:
                self._group_size = None
                self._collect(new, timeout, starting=True)
        except BaseException:
            self._end_workers()
            raise

    def _generation_of(self, world_size: int) -> int:
        """The generation of the group of ``world_size`` ranks: the one its ranks kept, or a
        new one they form on this call. Growing the pool keeps these (the groups' members are
        still there); ending the workers (as a change of placement does) forgets them."""
        if world_size not in self._generations:
            self._generation += 1
            self._generations[world_size] = self._generation
        return self._generations[world_size]

    def _collect(self, workers: list[RankProcess], timeout: float, starting=False) -> list:
        """One reply from each worker, by rank; raise if a rank raised, died or timed out."""
        pending = {w.rank: w for w in workers}
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
            for worker in {waitables[r].rank: waitables[r] for r in ready}.values():
                del pending[worker.rank]
                try:
                    if not worker.conn.poll():
                        raise EOFError
                    reply = messages.receive(worker.conn)
                except (EOFError, OSError):
                    raise self._died(worker, starting) from None
                if isinstance(reply, messages.Error):
                    errors[worker.rank] = reply
                    deadline = min(deadline, time.monotonic() + ERROR_GRACE)
                else:  # Ready while starting, Result during a call
                    replies[worker.rank] = getattr(reply, "value", reply)
        if errors:
            rank = min(errors)
            others = sorted(set(errors) - {rank})
            also = f" (ranks {others} raised too)" if others else ""
            raise RankError(f"{errors[rank].summary}{also}\n\nTraceback from rank {rank}:\n"
                            f"{errors[rank].traceback}", rank, errors[rank].traceback)
        if pending:
            what = "started" if starting else "answered"
            raise TimeoutError(f"rank(s) {sorted(pending)} had not {what} after {timeout:g} s; "
                               "the pool's processes were ended and start afresh on the next "
                               "call. Pass a larger timeout for longer runs.")
        return [replies[w.rank] for w in workers]

    def _died(self, worker: RankProcess, starting: bool) -> RankError:
        worker.process.join(1.0)
        code = worker.process.exitcode
        if code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        else:
            how = f"exited with code {code}"
        when = "while starting" if starting else "during the call"
        tail = rank_logs.read(self._log_path(worker.rank))[-2000:]
        hint = f" {GUARD_HINT}" if starting and main_path() else ""
        log = f"\nIts log ends with:\n{tail}" if tail.strip() else ""
        return RankError(f"rank {worker.rank} (pid {worker.process.pid}) {how} {when}; the "
                         f"pool starts afresh on the next call.{hint}{log}", worker.rank)

    def _end_workers(self, graceful: bool = False) -> None:
        """End every rank process and forget the group; later calls start fresh ones."""
        for w in self._workers:
            if graceful:
                try:
                    messages.send(w.conn, messages.Stop())
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
        self._group_size = None
        self._generations.clear()

    def _log_path(self, rank: int) -> str:
        return os.path.join(self._logdir, f"rank{rank}.log")


def died_idle(worker: RankProcess) -> bool:
    """Whether an idle rank is gone. An idle rank never writes, so a readable pipe is its end
    (EOF); ``is_alive()`` alone lags until the forkserver has reaped the process."""
    return not worker.process.is_alive() or worker.conn.poll()


def _worker_main(*args) -> None:
    """A rank process's entry point. The caller never imports engine.rank (it would load dynamo
    for nothing); the forkserver has it preloaded, so this import is free in the child."""
    from ddplab.engine.rank import worker_main

    worker_main(*args)


_shared: Pool | None = None
_shared_lock = threading.Lock()


def shared() -> Pool:
    """The pool behind ``ddplab.run``, made on first use and closed at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Pool()
            atexit.register(_shared.close)
        return _shared


def shared_logs() -> list[str]:
    return _shared.logs() if _shared is not None else []


def shared_log_paths() -> list[str]:
    return _shared.log_paths() if _shared is not None else []
