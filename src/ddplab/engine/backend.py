"""Which backend a group uses: NCCL with one GPU per rank, gloo otherwise."""

from __future__ import annotations

BACKENDS = ("auto", "gloo", "nccl")


def resolve_backend(backend: str, ranks_per_host: int) -> str:
    """``nccl`` only with one GPU per rank (NCCL refuses two ranks on one GPU, NVIDIA/nccl#418),
    else ``gloo``. An explicit ``nccl`` without enough GPUs is a ValueError before any rank
    starts."""
    import torch

    gpus = torch.cuda.device_count()
    if backend == "nccl" and gpus < ranks_per_host:
        raise ValueError(f"backend 'nccl' needs one GPU per rank: {ranks_per_host} ranks, "
                         f"{gpus} GPU(s) visible. Use backend='gloo' (or 'auto').")
    if backend == "auto":
        return "nccl" if gpus >= ranks_per_host else "gloo"
    return backend
