"""Records of gathered evaluation results (ranks/watch/gathered.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ddplab.doctor.records.base import Located


@dataclasses.dataclass(frozen=True)
class GatheredUse(Located):
    """The first use (``how``: the operation) of rows an ``all_gather`` at ``gather_file``:
    ``gather_line`` brought from an evaluation DistributedSampler's pass: how many samples it
    holds, how many distinct, which ones it holds more than once (``repeats``: index -> times)
    and which of the dataset's samples it misses (the first 8 of each)."""

    KIND: ClassVar[str] = "gathered_use"
    how: str
    gather_file: str | None
    gather_line: int | None
    loader: int | None
    pass_number: int | None
    dataset_len: int | None
    samples: int
    distinct: int
    repeated: list
    repeats: dict
    missing: list
