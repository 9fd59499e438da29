"""The length of an IterableDataset's epoch, which no ``len()`` gives: after the script, the
doctor iterates each IterableDataset a training loader drew from once more, to its end.

The doctor cuts training passes at ``Settings.batches`` batches, so a stream split unevenly
between the ranks (``itertools.islice(it, rank, None, world_size)`` over 67 samples) never
reaches the end where one rank runs out and the others wait. This pass does, without the
script: a separate iterator of the same dataset object in this rank's process (no workers,
after the script, so that nothing it draws changes the script's run), up to ``LIMIT`` items
or ``SECONDS``, with the loader's ``collate_fn`` on the first batch so that a pass that
repeats the training's (``same_start``) can be told from one that does not (a stream already
used up, a shuffle that draws from the random state). Only loaders without workers: with
workers the loader's epoch depends on how the dataset splits itself between them. The
process group is still there (its destruction waits for the process's end).
"""

from __future__ import annotations

import math
import time

import ddplab.doctor.records as records
from ddplab.doctor.ranks import recorder as _recorder
from ddplab.doctor.ranks.digest import first_tensor, tensor_hash

LIMIT = 1_000_000  # items counted at most: a longer stream is left uncounted
SECONDS = 20.0  # and the time the count may take
DATASETS: dict[int, object] = {}  # loader index -> the loader, kept to the end (no workers)


def remember(index: int, loader) -> None:
    """Keep a loader over an IterableDataset with no workers, to count its epoch later."""
    if loader.num_workers == 0:
        DATASETS[index] = loader


def _first_digest(loader, items: list) -> str | None:
    batch = loader.collate_fn(items[0] if loader.batch_size is None else items)
    tensor = first_tensor(batch)
    return tensor_hash(tensor) if tensor is not None else None


def _count(loader) -> tuple[int, bool, str | None]:
    size = loader.batch_size or 1
    first, items, start = [], 0, time.monotonic()
    for item in iter(loader.dataset):
        if items < size:
            first.append(item)
        items += 1
        if items >= LIMIT or time.monotonic() - start > SECONDS:
            return items, False, None
    return items, True, _first_digest(loader, first[:size]) if first else None


def count() -> None:
    """Count every kept training loader's IterableDataset (once per process), keeping none of
    the records the dataset's own code makes the watchers write meanwhile."""
    rec = _recorder.RECORDER
    kept = {kind: list(found) for kind, found in rec.records.items()}
    counted = []
    for index, loader in list(DATASETS.items()):
        passes = [p for p in kept.get(records.Pass.KIND, []) if p.loader == index]
        if not any(p.training for p in passes):
            continue
        try:
            items, complete, digest = _count(loader)
        except BaseException:  # the dataset cannot be iterated again here: nothing is claimed
            continue
        batches = (items // loader.batch_size if loader.drop_last else
                   math.ceil(items / loader.batch_size)) if loader.batch_size else items
        counted.append(records.IterableCount(
            loader=index, items=items, batches=batches, complete=complete,
            same_start=digest is not None and any(p.first == digest for p in passes
                                                  if p.training)))
    DATASETS.clear()
    rec.records = kept
    for record in counted:
        rec.add(record)
