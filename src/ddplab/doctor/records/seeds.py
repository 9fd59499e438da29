"""Records of seeds (ranks/watch/seeds.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ddplab.doctor.records.base import Located


@dataclasses.dataclass(frozen=True)
class Seed(Located):
    """``torch.manual_seed(seed)`` called by the reader's code."""

    KIND: ClassVar[str] = "seed"
    seed: int
