"""Where ranks run: a backend (NCCL or gloo) and a device (CPU or CUDA), one per process.

A :class:`Placement` is that pair. It is a property of the process, with one door:

    with ddplab.placed(backend="gloo", device="cuda"):   # or the call alone, for the process
        ddplab.run(fn, 4)                               # runs there; so does every driver
    ddplab.placement()                                  # Placement('gloo', 'cuda')

:func:`placed` says what this process's runs ask for, :func:`placement` is what that resolves to.
"auto" is resolved once (:func:`resolve`, then kept until the next :func:`placed`), so that a
curve over world sizes never divides a CPU run by a GPU run:

* ``DDPLAB_BACKEND`` / ``DDPLAB_DEVICE``, where set, say it (``gloo``/``nccl``, ``cpu``/``cuda``);
* else NCCL on CUDA where the GPUs can serve every world size asked for, gloo on CPU otherwise.
  NCCL refuses two ranks on one GPU (NVIDIA/nccl#418), so NCCL serves as many ranks per host as
  there are GPUs. Where the largest world size is not said, two GPUs or more are enough (one GPU
  could serve world size 1 only, and a sweep from 1 would change device midway). A lab or a
  page says its largest (``ddplab.placed(largest_world_size=8)``): with four GPUs it gets gloo on
  CPU, a placement that serves all of it, rather than NCCL up to 4 and a ValueError at 5.
* Under torchrun the launcher fixes the ranks per host (``LOCAL_WORLD_SIZE``): NCCL on CUDA where
  each has a GPU of its own.

What the placement cannot serve is a ValueError before any rank starts (:func:`check`), never a
silent switch: CUDA without a GPU, NCCL on CPU tensors, NCCL with more ranks than GPUs, a world
size beyond the largest said. gloo on CUDA serves any number of ranks: rank ``r`` uses
``cuda:(r % gpus)`` (gloo takes CUDA tensors for the collectives DDP uses, not for
``send``/``recv``: docs/notes/2026-11-26-gloo-cuda-point-to-point.md).

What does not run on some placement is named in :data:`UNSUPPORTED`; a driver asks
:func:`unsupported` (or :func:`require`) before it starts ranks.
"""

from __future__ import annotations

import dataclasses
import os
import threading

from ddplab.common.results import Placed
from ddplab.engine import forkserver, torchrun

BACKENDS = ("auto", "gloo", "nccl")
DEVICES = ("auto", "cpu", "cuda")
BACKEND_ENV = "DDPLAB_BACKEND"
DEVICE_ENV = "DDPLAB_DEVICE"
MAX_WORLD_SIZE = 64


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where every rank of a call runs: ``backend`` ("gloo" or "nccl") and ``device`` ("cpu"
    or "cuda"; rank r of a CUDA placement uses ``cuda:(r % gpus)``)."""

    backend: str
    device: str

    def __str__(self) -> str:
        return f"{self.backend} on {self.device}"

    def describe(self, world_size: int | None = None) -> str:
        """e.g. "gloo on cpu, 4 ranks" (for a figure's corner or a report's first line)."""
        if world_size is None:
            return str(self)
        return f"{self}, {world_size} rank" + ("s" if world_size != 1 else "")

    def most_ranks(self, gpus: int) -> int:
        """The most ranks per host this placement serves with ``gpus`` GPUs: one per GPU on
        NCCL (NVIDIA/nccl#418), else any number."""
        return gpus if self.backend == "nccl" else MAX_WORLD_SIZE

    def limit_note(self, gpus: int) -> str:
        """Why no more ranks than :meth:`most_ranks`, for a panel whose slider stops there."""
        return (f"{gpus} GPU{'s' if gpus != 1 else ''}: up to {self.most_ranks(gpus)} "
                f"rank{'s' if self.most_ranks(gpus) != 1 else ''} on NCCL; "
                f"{BACKEND_ENV}=gloo for more ranks on CPU")


class Ranks(Placed, list):
    """What ``ddplab.run`` returns: one result per rank, ordered by rank, and the placement
    they ran on (``.placement``, ``.backend``, ``.device``), which a Result records with
    ``Result.from_ranks(ranks, ...)``."""

    def __init__(self, values=(), placement: Placement | None = None):
        super().__init__(values)
        self.placement = placement


def gpu_count() -> int:
    """GPUs this process sees. ``torch.cuda.device_count`` asks NVML first, which neither
    initialises CUDA nor poisons a later fork (torch/cuda/__init__.py, ``device_count``)."""
    import torch

    return torch.cuda.device_count()


def check_names(backend: str, device: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}; got {device!r}")


def check_world_size(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) \
            or not 1 <= value <= MAX_WORLD_SIZE:
        raise ValueError(f"{name} must be an int from 1 to {MAX_WORLD_SIZE}, got {value!r}")


def range_of(world_size) -> int | None:
    """A command's ``world_size`` as the largest it will ask for, where it is one
    ``ddplab.run`` takes; else None, and the command's own check says what is wrong with it."""
    try:
        check_world_size("world_size", world_size)
    except ValueError:
        return None
    return world_size


def resolve(backend: str = "auto", device: str = "auto", *, gpus: int | None = None,
            ranks: int | None = None, environ=None) -> Placement:
    """What ``backend``/``device`` mean on a machine with ``gpus`` GPUs (this one's where None)
    for up to ``ranks`` ranks per host (None: not said). "auto" takes ``DDPLAB_BACKEND`` /
    ``DDPLAB_DEVICE`` from ``environ`` (``os.environ`` where None), else NCCL on CUDA where the
    GPUs serve ``ranks`` (at least 2 where not said), gloo on CPU otherwise; ``nccl`` implies
    CUDA, a CPU device gloo."""
    check_names(backend, device)
    environ = os.environ if environ is None else environ
    if backend == "auto":
        backend = environ.get(BACKEND_ENV) or "auto"
    if device == "auto":
        device = environ.get(DEVICE_ENV) or "auto"
    try:
        check_names(backend, device)
    except ValueError as exc:
        raise ValueError(f"{exc} (from {BACKEND_ENV} / {DEVICE_ENV})") from None
    if gpus is None:
        gpus = gpu_count() if "auto" in (backend, device) or device == "cuda" else 0
    enough = gpus >= (2 if ranks is None else max(1, ranks))
    if device == "auto":
        device = "cuda" if backend == "nccl" or (backend == "auto" and enough) else "cpu"
    if backend == "auto":
        backend = "nccl" if device == "cuda" and enough else "gloo"
    return Placement(backend, device)


def check(placement: Placement, ranks_per_host: int, gpus: int | None = None) -> None:
    """A ValueError, before any rank starts, for a placement this machine cannot serve."""
    if placement.device == "cpu" and placement.backend == "gloo":
        return
    if gpus is None:
        gpus = gpu_count()
    if placement.backend == "nccl" and placement.device != "cuda":
        raise ValueError("backend 'nccl' needs CUDA tensors: use device='cuda', or gloo on CPU.")
    if placement.backend == "nccl" and gpus < ranks_per_host:
        raise ValueError(
            f"backend 'nccl' needs one GPU per rank (NCCL refuses two ranks on one GPU, "
            f"NVIDIA/nccl#418): {ranks_per_host} ranks, {gpus} GPU(s) visible. Use "
            f"ddplab.placed(backend='gloo') (device='cuda' keeps the ranks' tensors on the "
            f"GPU), or set {BACKEND_ENV}=gloo.")
    if placement.device == "cuda" and gpus == 0:
        raise ValueError("device 'cuda' needs a GPU, and this process sees none "
                         "(torch.cuda.device_count() == 0). Use device='cpu' (or 'auto').")


# ---------------------------------------------------------------- the door: one per process

_lock = threading.RLock()
_asked = ("auto", "auto", None)  # backend, device, largest_world_size: what placed() said
_resolved: Placement | None = None  # what _asked means here, resolved on first use


class placed:
    """Where this process's runs go from now on: ``backend`` ("auto", "gloo", "nccl"),
    ``device`` ("auto", "cpu", "cuda") and, optionally, the ``largest_world_size`` they will
    ask for, which "auto" must serve (see the module's docstring; a larger world size is then a
    ValueError). The call sets it for the process; as ``with ddplab.placed(...) as where:`` it
    holds for the block only, and ``where`` is the resolved :class:`Placement`.

    Both forms, as ``torch.set_grad_enabled`` has: a notebook's widgets run their callbacks
    after the cell that made them, outside any ``with``, so a lab sets it with a call; the CLI,
    the report and the tests scope it with ``with``. A process-wide setting, not a context
    variable: threads (a hang watch's, a respawn's) see it too. The local pool follows it: a
    change of placement starts fresh rank processes (a process serves one placement for its
    life)."""

    def __init__(self, backend: str = "auto", device: str = "auto", *,
                 largest_world_size: int | None = None):
        global _asked, _resolved
        check_names(backend, device)
        if largest_world_size is not None:
            check_world_size("largest_world_size", largest_world_size)
        self._asked = (backend, device, largest_world_size)
        with _lock:
            self._previous = (_asked, _resolved)
            _asked, _resolved = self._asked, None
        forkserver.prestart()  # runs will come: the ranks' torch import overlaps the caller's

    def __repr__(self) -> str:  # what a notebook cell that calls it shows
        largest = self._asked[2]
        return f"ddplab.placed: {placement()}" + (f", up to {largest} ranks" if largest else "")

    def __enter__(self) -> Placement:
        return placement()

    def __exit__(self, *exc) -> None:
        global _asked, _resolved
        with _lock:
            _asked, _resolved = self._previous


def placement() -> Placement:
    """Where this process's runs go: what :func:`placed` asked for (or the environment, or the
    machine), resolved on first use and kept until the next :func:`placed`. Under torchrun
    the ranks per host are the launcher's, and the placement is checked against them here."""
    global _resolved
    with _lock:
        if _resolved is None:
            backend, device, largest = _asked
            if torchrun.under_torchrun():
                largest = torchrun.ranks_per_host()
            chosen = resolve(backend, device, ranks=largest)
            if torchrun.under_torchrun():
                check(chosen, largest)
            _resolved = chosen
        return _resolved


def serving(world_size: int) -> Placement:
    """:func:`placement`, checked for a run of ``world_size`` ranks on this machine (a
    ValueError before any rank starts where it cannot serve them)."""
    with _lock:
        chosen, largest = placement(), _asked[2]
    if torchrun.under_torchrun():
        return chosen  # checked once, against the launcher's ranks per host
    if largest is not None and world_size > largest:
        raise ValueError(
            f"world_size={world_size} is above the largest this process said it would run "
            f"(ddplab.placed(largest_world_size={largest})), for which {chosen} was chosen: "
            f"call ddplab.placed(largest_world_size={world_size}) first")
    check(chosen, world_size)
    return chosen


def needs_fresh_processes(workers: Placement, group_size: int | None, world_size: int,
                          placement: Placement) -> bool:
    """Whether live rank processes on ``workers`` whose last group had ``group_size`` ranks
    cannot serve a call of ``world_size`` ranks on ``placement``. A process serves one
    placement for its life (it learns it at start; a CPU rank hides the GPUs from itself,
    ``rank.hide_gpus``), and an NCCL group is never re-formed inside live processes
    (destroy/re-init races, pytorch#119196)."""
    if workers != placement:
        return True
    return placement.backend == "nccl" and group_size is not None and group_size != world_size


# (feature, placement) -> why it does not run there: what was seen, where, and what to do
# instead. A driver asks with the name it is given (a strategy, a hook), so an entry refuses
# exactly what was seen to fail (docs/notes/ has each observation; PowerSGD with gloo on CUDA
# ran on an H200, so it is not here).
UNSUPPORTED = {
    ("fsdp", Placement("gloo", "cuda")):
        "with gloo on CUDA tensors a rank was killed by SIGSEGV under FSDP2 (ddplab memory "
        "--strategy fsdp, 2 ranks on one H200's cuda:0, torch 2.11.0+cu130); the collectives "
        "FSDP2 calls (all_gather_into_tensor, reduce_scatter_tensor) and all_reduce and "
        "broadcast each ran there alone, once, on the default stream, where FSDP2 calls them "
        "from streams of its own, so the cause is not established: run FSDP with device='cpu' "
        "(gloo on CPU), or on NCCL with one GPU per rank",
}


def unsupported(feature: str, placement: Placement) -> str | None:
    """Why ``feature`` does not run on ``placement`` (None when nothing is known against it)."""
    return UNSUPPORTED.get((feature, placement))


def require(feature: str, placement: Placement) -> None:
    """A ValueError, before any rank starts, if ``feature`` does not run on ``placement``."""
    reason = unsupported(feature, placement)
    if reason:
        raise ValueError(f"{feature} on {placement}: {reason}.")
