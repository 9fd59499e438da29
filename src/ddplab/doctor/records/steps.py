"""Records of optimizer steps (ranks/watch/steps.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ddplab.doctor.records.base import Located, Record


@dataclasses.dataclass(frozen=True)
class Optimizer(Located):
    """An optimizer made: its type and its groups' learning rates."""

    KIND: ClassVar[str] = "optimizer"
    index: int
    type: str
    lr: list


@dataclasses.dataclass(frozen=True)
class MicroStep:
    """A DDP forward with gradients enabled (part of a ``Step``): which DDP, whether it
    synchronises (``require_backward_grad_sync``), its batch size (None if unknown) and the
    digest of its first input."""

    ddp: int
    sync: bool
    batch: int | None
    digest: str | None = None  # of the forward's first input tensor: compared across ranks


@dataclasses.dataclass(frozen=True)
class Backward:
    """A backward (part of a ``Step``): the reader's line, and the constant factor between the
    loss given to it and the computation under it (``loss / 4``: 0.25, ``ops`` ``["/ 4"]``,
    ``under`` the autograd node below them); ``factor`` None where the loss was not one
    tensor. ``value``: the loss, a number a script sums for its log."""

    file: str | None
    line: int | None
    factor: float | None
    ops: list
    under: str | None
    value: float | None = None  # the loss's value, where it is one number


@dataclasses.dataclass(frozen=True)
class Step(Located):
    """An optimizer step (``number``: 1, 2, ...) and what led to it: the DDP micro-steps (the
    first 16) and the backwards (the first 16) since the step before, with their
    counts, and the learning rates it stepped with. The first step also has the optimizer's
    type; a step after
    a micro-step that did not synchronise has each gradient's summary (``grads``). ``skipped``:
    a GradScaler's step that did not call ``optimizer.step()`` (inf or NaN in the scaled
    gradients), still a step of the script's loop."""

    KIND: ClassVar[str] = "step"
    PARTS: ClassVar[dict] = {"micro": MicroStep, "backwards": Backward}
    number: int
    micro: list[MicroStep]
    micro_count: int
    backwards: list[Backward]
    backward_count: int
    optimizer: int | None
    lr: list | None = None
    optimizer_type: str | None = None
    grads: dict | None = None
    skipped: bool = False


@dataclasses.dataclass(frozen=True)
class Replica(Record):
    """State after a step, name -> [digest, sum, norm, "parameter" or "buffer"]: of a module
    run at top level (``root``), or of the parameters an optimizer steps (``optimizer``, with
    how many of them a DDP wraps: ``in_ddp`` of ``params``)."""

    KIND: ClassVar[str] = "replica"
    root: int | None
    tensors: dict
    optimizer: int | None = None
    in_ddp: int = 0
    params: int = 0
