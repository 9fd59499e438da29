"""Where rank processes come from: multiprocessing's forkserver, with torch preloaded once.

The forkserver imports torch, torch.distributed, DDP and dynamo once (``engine.preload``), then
forks every rank process from that state, so a new rank costs a fork, not a 2 s import. The
caller itself is never forked: fork after torch work in the parent can hang the child
(pytorch#41197). Where there is no forkserver (Windows), ranks are spawned. A child of either
re-imports the caller's ``__main__`` by its file (:func:`main_file_hidden_if_missing`).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import signal
import sys
import threading

from ddplab.engine.torchrun import under_torchrun

POOL_PROCESS_ENV = "DDPLAB_POOL_PROCESS"  # set in the forkserver and every rank process

_lock = threading.Lock()
_started = False


def start_method() -> str:
    """forkserver where there is one (Linux, macOS), spawn elsewhere; never fork (see above)."""
    return os.environ.get("DDPLAB_START_METHOD") or (
        "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn")


def process_context():
    """The multiprocessing context that starts rank processes.

    The forkserver is started here if it is not running yet, marked so that the ``ddplab``
    import inside it (for the preload) does not try to start another one.
    """
    global _started
    method = start_method()
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        from multiprocessing import forkserver

        ctx.set_forkserver_preload(["ddplab.engine.preload"])
        with _lock:
            saved = os.environ.get(POOL_PROCESS_ENV)
            os.environ[POOL_PROCESS_ENV] = "1"
            try:
                forkserver.ensure_running()
            finally:
                if saved is None:
                    del os.environ[POOL_PROCESS_ENV]
        if not _started:
            _started = True
            atexit.register(end_forkserver)
    return ctx


def prestart() -> None:
    """Start the forkserver now, in the background (``ddplab.placed`` calls this: a notebook's
    first cell says where its runs go, so they will come).

    Its preload (torch, DDP, dynamo) takes about 2 s here and is the bulk of the first call's
    latency; started at the first ``placed()``, it overlaps with the caller's own imports and
    cells (benchmarks/RESULTS.md, "The pool"). ``import ddplab`` alone starts nothing.
    Only in a top-level process: not in a rank, not in the forkserver itself, not under
    torchrun; ``DDPLAB_PRESTART=0`` turns it off.
    """
    if (os.environ.get("DDPLAB_PRESTART", "1") != "0"
            and POOL_PROCESS_ENV not in os.environ
            and multiprocessing.parent_process() is None
            and not getattr(multiprocessing.current_process(), "_inheriting", False)
            and not under_torchrun()
            and (os.environ.get("DDPLAB_START_METHOD") or "forkserver") == "forkserver"
            and "forkserver" in multiprocessing.get_all_start_methods()):
        process_context()


def end_forkserver() -> None:
    """At exit, end the forkserver we started, even mid-preload, so nothing outlives us.

    (Left alone it would exit by itself, but only once its preload is over.)
    """
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def main_path() -> str | None:
    """The file of ``__main__`` if it has one that exists (a script), else None (a notebook,
    ``python -c``, a script read from standard input: ``__file__ == "<stdin>"``)."""
    path = getattr(sys.modules["__main__"], "__file__", None)
    return path if path and os.path.exists(path) else None


@contextlib.contextmanager
def main_file_hidden_if_missing():
    """Multiprocessing re-imports ``__main__`` by its ``__file__`` in every child; for a script
    read from standard input that file does not exist and every rank would die starting."""
    main = sys.modules["__main__"]
    path = getattr(main, "__file__", None)
    if path is None or main_path() is not None or getattr(main, "__spec__", None) is not None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path
