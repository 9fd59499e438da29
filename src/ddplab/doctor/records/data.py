"""Records of data (ranks/watch/data.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ddplab.doctor.records.base import Located, Record


@dataclasses.dataclass(frozen=True)
class Loader(Located):
    """A DataLoader made: its dataset (type, length, a fingerprint equal on two ranks for the
    same data), its sampler (type, length, whether it is a DistributedSampler), batch size,
    and how many times it was iterated (the script's epochs, where only training iterates
    it)."""

    KIND: ClassVar[str] = "loader"
    index: int
    dataset: str
    dataset_len: int | None
    fingerprint: str
    iterable: bool
    sampler: str | None
    distributed: bool
    sampler_len: int | None
    batch_size: int | None
    drop_last: bool
    iterations: int = 0  # iter(loader) calls, those the doctor ended at once included


@dataclasses.dataclass(frozen=True)
class Pass(Located):
    """One ``iter(loader)`` (``number``: the loader's 0th, 1st, ... pass), as far as it went:
    batches and samples drawn, whether a backward ran during it (``training``), whether the
    doctor cut it (``capped``) or it ran out (``exhausted``), and the first batch's digest.
    ``backwards_seen`` and ``steps_at_start`` are the counts the cut is decided by. A pass
    after training ended (``ended``) is the doctor's: one batch, or a whole pass in ``eval()``
    mode, its steps neither counted nor judged."""

    KIND: ClassVar[str] = "pass"
    loader: int
    number: int
    len: int | None
    batches: int = 0
    samples: int = 0
    training: bool = False
    capped: bool = False
    exhausted: bool = False
    backwards_seen: int = 0
    steps_at_start: int = 0
    first: str | None = None
    ended: bool = False


@dataclasses.dataclass(frozen=True)
class SamplerOrder(Record):
    """The indices a DistributedSampler gave this rank for one pass: its settings, the first 8
    indices, their count and a digest of all of them, and the loader pass it served."""

    KIND: ClassVar[str] = "sampler_order"
    sampler: int
    epoch: int
    shuffle: bool
    seed: int
    drop_last: bool
    num_replicas: int
    sampler_rank: int
    dataset_len: int | None
    total_size: int
    first: list
    count: int
    digest: str
    loader: int | None
    pass_number: int | None
    indices: list | None = None  # all of them, up to 65,536: shards compared across ranks


@dataclasses.dataclass(frozen=True)
class CustomOrder(Record):
    """The order a sampler of the script's own class that has ``set_epoch`` gave for one pass:
    its first indices (up to 64, what a message shows and the digest covers: an endless
    sampler is never drawn to its end), the epoch of its last ``set_epoch`` (None: never
    called), the loader pass it served, and where its ``__iter__`` is defined."""

    KIND: ClassVar[str] = "custom_order"
    sampler: int
    type: str
    epoch: int | None
    first: list
    digest: str
    loader: int | None
    pass_number: int | None
    iter_file: str | None
    iter_line: int | None


@dataclasses.dataclass(frozen=True)
class SetEpoch(Located):
    """``sampler.set_epoch(epoch)``, a DistributedSampler's or a sampler's of the script's own
    class."""

    KIND: ClassVar[str] = "set_epoch"
    sampler: int
    epoch: int


@dataclasses.dataclass(frozen=True)
class IterableCount(Record):
    """An IterableDataset a training loader drew from, iterated once more by the doctor after
    the script (a separate iterator of the same dataset object, in this rank's process, no
    workers), to its end or to a limit: its items, the batches the loader would make of them
    (``batch_size``, ``drop_last``), whether it ended (``complete``) and whether its first
    batch is the one the training's first pass began with (``same_start``: the pass repeats
    the training's)."""

    KIND: ClassVar[str] = "iterable_count"
    loader: int
    items: int
    batches: int
    complete: bool
    same_start: bool
