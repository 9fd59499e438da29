"""A tensor's fingerprint: a hash of its bytes (Megatron compares replicas by SHA-1 of each
parameter, ``check_param_hashes_across_dp_replicas``) and a few numbers a reader can compare."""

from __future__ import annotations

import hashlib


def tensor_hash(tensor) -> str:
    import torch

    data = tensor.detach().reshape(-1).cpu().contiguous()
    if data.dtype != torch.uint8:
        data = data.view(torch.uint8) if data.numel() else data.to(torch.uint8)
    return hashlib.blake2b(data.numpy().tobytes(), digest_size=8).hexdigest()


def summary(tensor) -> list:
    """[hash, sum, norm]: equal hashes mean equal bytes; the numbers are for the message."""
    t = tensor.detach()
    as_float = t.double()
    return [tensor_hash(t), float(as_float.sum()), float(as_float.norm())]


def first_tensor(batch):
    import torch

    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            found = first_tensor(item)
            if found is not None:
                return found
    return None
