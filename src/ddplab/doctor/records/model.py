"""Records of the model (ranks/watch/model.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ddplab.doctor.records.base import Located, Record


@dataclasses.dataclass(frozen=True)
class Ddp(Located):
    """A DistributedDataParallel made: its options, its parameters' devices, the backend its
    group asked for (and whether NCCL's rules hold), what it all-reduces (trainable
    parameters, numbers, bytes), its buffers and the wrapped module's type."""

    KIND: ClassVar[str] = "ddp"
    index: int
    find_unused: bool
    broadcast_buffers: bool
    static_graph: bool
    devices: list
    nccl: bool
    requested: str | None
    params: int
    numel: int
    bytes: int
    buffers: int
    module: str


@dataclasses.dataclass(frozen=True)
class Root(Located):
    """A module run at top level with parameters or buffers: a DDP (``kind`` ``"ddp"``, with
    its index), the module inside a DDP run without it (``"bypass"``, with the DDP's index), a
    ``nn.DataParallel`` (``"data_parallel"``) or another module (``"plain"``), whose state is
    compared across ranks."""

    KIND: ClassVar[str] = "root"
    index: int
    kind: str
    ddp: int | None
    module: str


@dataclasses.dataclass(frozen=True)
class Unused(Record):
    """The trainable parameters of DDP ``ddp`` that one backward did not reach."""

    KIND: ClassVar[str] = "unused"
    ddp: int
    names: list


@dataclasses.dataclass(frozen=True)
class LoadStateDict(Located):
    """``Module.load_state_dict``: on which module, whether any DDP existed by then, and
    whether the module is a DDP or the module inside one."""

    KIND: ClassVar[str] = "load_state_dict"
    module: str
    after_wrap: bool
    wrapped: bool
