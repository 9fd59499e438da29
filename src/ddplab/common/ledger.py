"""Bytes held, counted from tensors: each distinct storage once.

Two tensors may be views of one storage (a gradient that is a view into DDP's bucket, with
``gradient_as_bucket_view=True``), so a storage is counted the first time it is seen, under the
key it was first added with; a sharded tensor (FSDP2's DTensor) counts its local shard only
(``to_local()``), storage padding included. The memory chapter counts a rank's bytes by
category with it, and the shard-optimizer exercise a rank's optimizer state by parameter.
"""

from __future__ import annotations

import torch


def local(tensor: torch.Tensor) -> torch.Tensor:
    """The part of ``tensor`` this rank stores: a DTensor's local shard, else the tensor."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


class Ledger:
    """Counts storages by key; a storage already counted adds nothing. ``keys`` start at 0;
    any other key appears once a storage is counted under it."""

    def __init__(self, keys=()):
        self.seen: set[int] = set()
        self.bytes = dict.fromkeys(keys, 0)

    def add(self, key: str, tensors) -> None:
        for tensor in tensors:
            if tensor is None:
                continue
            storage = local(tensor).untyped_storage()
            if storage.nbytes() == 0 or storage.data_ptr() in self.seen:
                continue
            self.seen.add(storage.data_ptr())
            self.bytes[key] = self.bytes.get(key, 0) + storage.nbytes()
