"""One process that imports torch once and forks the ranks from there.

A rank started from scratch imports torch (about 1.4 s of CPU here) and, at DDP's
construction, dynamo (about 1.1 s: ``DistributedDataParallel.__init__`` reads
``torch._dynamo.utils.get_optimize_ddp_mode``); the engine's forkserver preloads the same for
the same reason (``ddplab.engine.preload``). The doctor starts this process
with the ranks' common environment; it imports, then reads one request per line on stdin
(``{"request": n, "log": path, "env": {...}, "cwd": path}``), forks, and answers
``{"pid": ..., "request": n}``; it reports
each child's end as ``{"exit": pid, "status": code}``. Its children are ranks in sessions of
their own, so that the doctor can end each with everything it started. Nothing here has
threads when it forks.

Why not the engine's forkserver: multiprocessing's forkserver runs a function in a child that
keeps the server's environment, folder and session, and talks to it over a pipe; a doctor's
rank must run a reader's script as ``python train.py`` would, with torchrun's environment set
before the script's first import, in the reader's folder, in a session of its own. What the two
share is how they warm up (``engine.warm.frozen_imports``) and the store on loopback
(``engine.loopback``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys

from ddplab.engine import rank_logs
from ddplab.engine.warm import frozen_imports


def preload() -> None:
    with frozen_imports():
        import torch  # noqa: F401
        import torch._dynamo  # noqa: F401
        import torch.distributed  # noqa: F401
        from torch.nn.parallel import DistributedDataParallel  # noqa: F401

        import ddplab.doctor.ranks.rank  # noqa: F401


def _child(request: dict) -> None:
    """In the forked child: become the rank ``request["env"]`` describes; never return."""
    code = 1
    try:
        os.setsid()
        rank_logs.send_output_to(request["log"])
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        from ddplab.doctor.ranks import rank
        from ddplab.doctor.ranks import recorder as _recorder

        _recorder.reset()  # made in the zygote: this process's own
        rank.main()  # ends the process itself
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _reap(out) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        out.write(json.dumps({"exit": pid, "status": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()


def main() -> None:
    from ddplab.engine.lifeline import exit_with_parent

    exit_with_parent()
    preload()
    out = sys.stdout
    out.write(json.dumps({"ready": os.getpid()}) + "\n")
    out.flush()
    stdin = sys.stdin.fileno()
    buffered = b""
    while True:
        ready, _, _ = select.select([stdin], [], [], 0.1)
        _reap(out)
        if not ready:
            continue
        chunk = os.read(stdin, 65536)
        if not chunk:  # the doctor is done (or gone): the children end with their sessions
            return
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _child(request)
            out.write(json.dumps({"pid": pid, "request": request["request"]}) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
