"""What runs inside a rank process: the context a rank function receives, and the worker loop.

A rank function is ``fn(ctx, **params)``: a function of an importable module, or one from a
notebook cell shipped by value (``messages.Shipped``, unpickled here). It runs once on every
rank with a process group already formed, and returns plain data. Tensors in the
result are turned into numpy arrays here, because a tensor sent through a multiprocessing pipe
travels as a shared-memory file descriptor that is gone once the sender moves on
(``FileNotFoundError`` in ``rebuild_storage_fd``).

The worker loop (:func:`worker_main`) is what the local pool runs in each of its processes. It
keeps every process group it joins alive across calls (:mod:`.groups`: one per world size the
pool has served), because forming a group costs more than a small DDP step (see
``benchmarks/RESULTS.md``, "Kept groups").
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import os
import signal
import socket
import sys
import traceback

# Unpickling a function shipped by value calls into cloudpickle: preloaded with this module.
import cloudpickle  # noqa: F401
import torch

# The forkserver preloads this module, so every rank is forked with these already imported.
# DDP's constructor reads torch._dynamo.utils.get_optimize_ddp_mode(), which imports dynamo
# (and sympy) lazily: 1.3 s per rank on a 2-core machine if it were left to each rank.
import torch._dynamo  # noqa: F401
import torch.distributed as dist
import torch.nn.parallel  # noqa: F401

from ddplab.engine import messages, rank_logs
from ddplab.engine.groups import Groups
from ddplab.engine.lifeline import exit_with_parent

LOOPBACK_IFNAME = "lo0" if sys.platform == "darwin" else "lo"


@dataclasses.dataclass(frozen=True)
class RankContext:
    """Where a rank function is running. ``local_rank`` is the rank within its host."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    host: str


def plain(value):
    """``value`` with every tensor replaced by a numpy array (recursively through containers)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(plain(v) for v in value)
    return value


def device_for(device: str, local_rank: int) -> torch.device:
    """``cuda:(local_rank % gpus)`` on a CUDA placement, else the CPU. The caller has checked
    that NCCL has one GPU per rank (NCCL refuses two ranks on one GPU, NVIDIA/nccl#418), so the
    modulo only ever folds gloo's ranks onto fewer GPUs."""
    if device == "cuda":
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def hide_gpus() -> None:
    """Make this process a CPU machine's: no GPU visible, so torch's "if CUDA is available"
    paths (PowerSGD synchronises CUDA, powerSGD_hook.py:630) take the CPU branch.

    CUDA reads ``CUDA_VISIBLE_DEVICES`` when it first initialises in a process, and torch caches
    the device count only after that (``torch.cuda.device_count``), so setting it here, first
    thing in the rank, works as long as the forkserver never touched CUDA before forking us. If
    it had, this rank would still see the GPUs: that is an error, not a silent GPU rank."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if torch.cuda.is_available():
        raise RuntimeError("a CPU rank still sees a GPU although CUDA_VISIBLE_DEVICES is empty: "
                           "CUDA was initialised before this rank was forked")


def worker_main(conn, rank: int, store_port: int, log_path: str, placement) -> None:
    """Serve rank ``rank`` of the local pool until told to stop or the parent goes away.
    ``placement`` (``engine.placement.Placement``) is where every call it serves runs, learnt
    once here: a CPU rank never sees a GPU."""
    rank_logs.send_output_to(log_path)
    if placement.device == "cpu":
        hide_gpus()
    # Jupyter's interrupt signals the kernel's whole process group: the kernel decides, not us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()  # dies with the forkserver, which exits with the kernel
    # Every socket gloo or NCCL opens for this group listens on loopback only.
    os.environ["GLOO_SOCKET_IFNAME"] = LOOPBACK_IFNAME
    os.environ["NCCL_SOCKET_IFNAME"] = LOOPBACK_IFNAME
    torch.set_num_threads(1)  # ranks share a few cores; more threads per rank only contend.
    store = dist.TCPStore("127.0.0.1", store_port, is_master=False,
                          timeout=datetime.timedelta(seconds=60))
    messages.send(conn, messages.Ready(os.getpid()))
    groups = Groups()  # every group this process has joined, one of them the default
    while True:
        try:
            message = messages.receive(conn)
        except (EOFError, OSError):
            break
        except BaseException as exc:  # e.g. the rank function's module cannot be imported here
            messages.send(conn, _error_reply(rank, exc, "could not load the call"))
            continue
        if isinstance(message, messages.Stop):
            break
        call = message
        try:
            fn, params = _loaded(call)
        except BaseException as exc:  # e.g. a module the function needs is missing here
            messages.send(conn, _error_reply(rank, exc, "could not load the call"))
            continue
        print(f"--- {getattr(fn, '__qualname__', fn)} on rank {rank} of {call.world_size}",
              flush=True)
        try:
            ctx = groups.use(call.generation,
                             functools.partial(_join, store, call, rank, placement))
            reply = messages.Result(plain(fn(ctx, **params)))
        except BaseException as exc:
            reply = _error_reply(rank, exc, "raised")
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        messages.send(conn, reply)
    groups.close()


def _loaded(call: messages.Run):
    """(fn, params) of a call: unpickled from a ``Shipped`` payload, or as they came."""
    if isinstance(call.fn, messages.Shipped):
        return call.fn.load()
    return call.fn, call.params


def _join(store, call: messages.Run, rank: int, placement) -> RankContext:
    """Form the group of ``call`` (a new generation) on ``placement``: every rank of its world
    size calls this."""
    store.set_timeout(datetime.timedelta(seconds=call.timeout))
    device = device_for(placement.device, rank)
    # A fresh key prefix per group: re-forming a group under a used prefix hangs (pytorch#55967).
    dist.init_process_group(placement.backend,
                            store=dist.PrefixStore(f"ddplab/gen{call.generation}/", store),
                            rank=rank, world_size=call.world_size,
                            timeout=datetime.timedelta(seconds=call.timeout))
    return RankContext(rank=rank, world_size=call.world_size, local_rank=rank, device=device,
                       backend=placement.backend, host=socket.gethostname())


def _error_reply(rank: int, exc: BaseException, what: str) -> messages.Error:
    print(traceback.format_exc(), file=sys.stderr, flush=True)
    return messages.Error(f"rank {rank} {what} {type(exc).__name__}: {exc}",
                          traceback.format_exc())
