"""Records of collectives (ranks/watch/collectives.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ddplab.doctor.records.base import Located


@dataclasses.dataclass(frozen=True)
class Collective(Located):
    """One collective the script called (or DDP did: ``by``): its op, the script's sequence
    number in the group (None for point-to-point and for DDP's own), the group (``"world"``
    or its ranks, ``"0,1"``), the backend asked for and whether NCCL's rules hold (CPU
    tensors fail), the tensors' devices, the first tensor's dtype and size and (up to 8
    numbers) its values before and after, the reduce op, the evaluation samples this rank drew
    since its previous reduction, and the DDP parameter whose gradient it is (``grad_of``)."""

    KIND: ClassVar[str] = "collective"
    op: str
    seq: int | None
    group: str
    devices: list
    nccl: bool
    requested: str | None
    reduce: str | None
    dtype: str | None
    numel: int | None
    before: list | None
    eval_samples: int
    p2p: bool
    after: list | None = None
    by: str | None = None  # a DdpCall, when DDP issued it (ranks/watch/ddp_collectives.py)
    grad_of: str | None = None  # the DDP parameter whose .grad is the first tensor
