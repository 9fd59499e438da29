"""Records of learning-rate schedules (ranks/watch/schedules.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ddplab.doctor.records.base import Located


@dataclasses.dataclass(frozen=True)
class Schedule(Located):
    """A scheduler whose length is given (``OneCycleLR``'s ``total_steps``,
    ``CosineAnnealingLR``'s ``T_max``, ``PolynomialLR``'s ``total_iters``): that length, the
    ``epochs`` and ``steps_per_epoch`` it was given (OneCycleLR), and how far the run walked
    it: its ``step()`` calls and the optimizer steps taken meanwhile."""

    KIND: ClassVar[str] = "schedule"
    index: int
    type: str
    length: int
    length_name: str
    epochs: int | None
    steps_per_epoch: int | None
    optimizer: int | None
    optimizer_steps_at_start: int
    steps: int = 0  # step() calls after its construction
    optimizer_steps: int = 0  # optimizer steps from its construction to its last step()
