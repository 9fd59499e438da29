"""Records of the process group (ranks/watch/group.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ddplab.doctor.records.base import Located


@dataclasses.dataclass(frozen=True)
class GroupInit(Located):
    """``init_process_group``: the backend the script asked for, the one that runs here (NCCL
    without CUDA becomes gloo), the one torch reports, and the group's size."""

    KIND: ClassVar[str] = "group_init"
    requested: str | None
    used: str | None
    backend: str
    world_size: int


@dataclasses.dataclass(frozen=True)
class GroupDestroy(Located):
    """``destroy_process_group`` of the default group (deferred to the process's end)."""

    KIND: ClassVar[str] = "group_destroy"


@dataclasses.dataclass(frozen=True)
class DuplicateRank(Located):
    """A process claimed a rank another process of the same group had claimed already: the
    rank, the group's size, this process's id and the reader's line that passed it."""

    KIND: ClassVar[str] = "duplicate_rank"
    rank: int
    world_size: int
    pid: int


@dataclasses.dataclass(frozen=True)
class WorldSizeRead(Located):
    """The first time the reader's code read the world size (``how``: the call), before its
    first optimizer step."""

    KIND: ClassVar[str] = "world_size_read"
    how: str
