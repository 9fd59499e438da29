"""Records of mixed precision and clipping (ranks/watch/amp.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ddplab.doctor.records.base import Located


@dataclasses.dataclass(frozen=True)
class Clip(Located):
    """A gradient clip (``how``: which function), whether an enabled GradScaler's scale was
    still on the gradients (and that scale), the norm it returned and the limit it got."""

    KIND: ClassVar[str] = "clip"
    how: str
    scaled: bool
    scale: float | None
    norm: float | None
    limit: float | None
