"""Where ranks run: a backend (NCCL or gloo) and a device (CPU or CUDA), chosen once per pool.

A :class:`Placement` is that pair. What ``"auto"`` means is decided once, for the life of a
pool (:func:`default_placement`), so that a curve over world sizes never divides a CPU run by
a GPU run:

* ``DDPLAB_BACKEND`` / ``DDPLAB_DEVICE``, where set, say it (``gloo``/``nccl``, ``cpu``/``cuda``);
* else NCCL on CUDA where at least two GPUs are visible, gloo on CPU otherwise. One GPU is not
  enough: NCCL refuses two ranks on one GPU (NVIDIA/nccl#418), so on one GPU NCCL could serve
  world size 1 only, and a sweep would change device midway.

A call may ask for a backend or device of its own (:func:`resolve`): ``nccl`` implies CUDA;
what is left at ``"auto"`` is the pool's. What the placement cannot serve is a ValueError
before any rank starts (:func:`check`), never a silent switch: CUDA without a GPU, NCCL on CPU
tensors, NCCL with more ranks than GPUs. gloo on CUDA is allowed with any number of ranks:
rank ``r`` uses ``cuda:(r % gpus)``, so one GPU runs the chapters' CUDA code at world size 2 and
more (gloo takes CUDA tensors for the collectives DDP uses, not for ``send``/``recv``: see
ARCHITECTURE.md, "gloo on CUDA").

Under torchrun (:mod:`.torchrun`) ``"auto"`` is NCCL on CUDA with one GPU per process on the
node, gloo on CPU otherwise: there the launcher, not a sweep, fixes the world size.

What does not run on some placement is named in :data:`UNSUPPORTED`; a driver asks
:func:`unsupported` (or :func:`require`) before it starts ranks.
"""

from __future__ import annotations

import dataclasses
import os

from ddplab.common.results import Placed

BACKENDS = ("auto", "gloo", "nccl")
DEVICES = ("auto", "cpu", "cuda")
BACKEND_ENV = "DDPLAB_BACKEND"
DEVICE_ENV = "DDPLAB_DEVICE"


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


class Ranks(Placed, list):
    """What ``ddplab.run`` returns: one result per rank, ordered by rank, and the placement
    they ran on (``.placement``, ``.backend``, ``.device``), which a Result records with
    ``Result.on(ranks)``."""

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


def from_environment(backend: str = "auto", device: str = "auto") -> tuple[str, str]:
    """``backend``/``device`` with "auto" replaced by ``DDPLAB_BACKEND``/``DDPLAB_DEVICE``."""
    if backend == "auto":
        backend = os.environ.get(BACKEND_ENV) or "auto"
    if device == "auto":
        device = os.environ.get(DEVICE_ENV) or "auto"
    try:
        check_names(backend, device)
    except ValueError as exc:
        raise ValueError(f"{exc} (from {BACKEND_ENV} / {DEVICE_ENV})") from None
    return backend, device


def default_placement(backend: str = "auto", device: str = "auto", *, gpus: int | None = None,
                      ranks_per_host: int | None = None) -> Placement:
    """What "auto" means here, decided once per pool (see the module's docstring). With
    ``ranks_per_host`` (torchrun) auto takes NCCL when every process has a GPU of its own."""
    backend, device = from_environment(backend, device)
    if gpus is None:
        gpus = gpu_count() if "auto" in (backend, device) or device == "cuda" else 0
    enough = gpus >= (2 if ranks_per_host is None else max(1, ranks_per_host))
    if device == "auto":
        device = "cuda" if backend == "nccl" or (backend == "auto" and enough) else "cpu"
    if backend == "auto":
        backend = "nccl" if device == "cuda" and enough else "gloo"
    return Placement(backend, device)


def resolve(backend: str, device: str, default: Placement) -> Placement:
    """A call's placement: what it asks for, the pool's ``default`` for what it leaves at
    "auto" (``nccl`` implies CUDA; a CPU device implies gloo)."""
    check_names(backend, device)
    if device == "auto":
        device = "cuda" if backend == "nccl" else default.device
    if backend == "auto":
        backend = default.backend if (default.backend != "nccl" or device == "cuda") else "gloo"
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
            f"backend='gloo' (device='cuda' keeps the ranks' tensors on the GPU), or set "
            f"{BACKEND_ENV}=gloo.")
    if placement.device == "cuda" and gpus == 0:
        raise ValueError("device 'cuda' needs a GPU, and this process sees none "
                         "(torch.cuda.device_count() == 0). Use device='cpu' (or 'auto').")


def needs_fresh_processes(workers_placement: Placement, group, world_size: int,
                          placement: Placement) -> bool:
    """Whether live rank processes cannot serve the next call's group. A process serves one
    device for its life (a CPU rank hides the GPUs from itself at start, ``rank.hide_gpus``),
    and an NCCL group is never re-formed inside live processes (destroy/re-init races,
    pytorch#119196)."""
    if workers_placement.device != placement.device:
        return True
    return group is not None and group != (world_size, placement) \
        and "nccl" in (placement.backend, group[1].backend)


# (feature, placement) -> why it does not run there: what was seen, where, and what to do
# instead. A driver asks with the name it is given (a strategy, a hook), so an entry refuses
# exactly what was seen to fail. PowerSGD with gloo on CUDA is not here any more: its refusal
# rested on one H100 run of a script that is not kept (issue 27, before ddplab offered gloo on
# CUDA), and torch's hook ran there on an H200 (see compression.py).
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
