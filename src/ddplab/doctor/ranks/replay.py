"""The reference run's training batches: for optimizer step k, exactly the samples the N ranks
trained on at step k, joined along the batch dimension (rank 0's, then rank 1's, ...; with
micro-steps, micro-step 1 of every rank, then micro-step 2, ...), yielded in as many batches as
the one-process script takes micro-steps per optimizer step (``plan.json``'s ``micro``: the
probe's count where the script reads the world size, else the N ranks' own).

So a script that divides a global batch by the world size gets batches N times larger (one
rank-batch of each rank in each), and one that takes N times more micro-steps (nanoGPT's
``gradient_accumulation_steps //= world_size`` read backwards) gets the ranks' batches one by
one. Each batch yielded carries its chunks: the sizes of the ranks' batches it is made of, in
order, for the forward in the ranks' chunks (``ranks/chunked.py``).
"""

from __future__ import annotations

import dataclasses

from ddplab.doctor.reference import collate, layout


@dataclasses.dataclass
class Item:
    step: int
    loader: int
    pass_number: int
    batch: object
    chunks: list


def _interleaved(per_rank: list[list]) -> list:
    """Micro-step 1 of every rank in rank order, then micro-step 2, ..."""
    out = []
    for j in range(max((len(e) for e in per_rank), default=0)):
        out.extend(entries[j] for entries in per_rank if j < len(entries))
    return out


def items_for_step(step: int, entries: list[dict], micro: int | None,
                   world_size: int) -> tuple[list, str | None]:
    """The reference's batches for ``step`` from the ranks' ``entries`` (interleaved), cut into
    ``micro`` batches of nearly equal size (by default, as many as one rank took); a note where
    the batches cannot be cut."""
    if not entries:
        return [], None
    count = micro or max(1, len(entries) // max(1, world_size))
    sizes = [collate.size(e["batch"]) for e in entries]
    if None in sizes:  # ragged or non-tensor: the ranks' batches as they are, one by one
        return [Item(step, e["loader"], e["pass"], e["batch"], [1]) for e in entries], (
            "a batch has no common first dimension: the ranks' batches are replayed one by "
            "one, not joined")
    total = sum(sizes)
    bounds = [round(i * total / count) for i in range(count + 1)]
    items, starts = [], [sum(sizes[:i]) for i in range(len(sizes))]
    for lo, hi in zip(bounds, bounds[1:]):
        pieces, chunks = [], []
        for e, start, n in zip(entries, starts, sizes):
            a, b = max(lo, start), min(hi, start + n)
            if a < b:
                pieces.append(collate.cut(e["batch"], a - start, b - start, n))
                chunks.append(b - a)
        if pieces:
            first = next(e for e, s, n in zip(entries, starts, sizes) if s + n > lo)
            items.append(Item(step, first["loader"], first["pass"], collate.join(pieces),
                              chunks))
    return items, None


class Replay:
    """The queue of the reference's training batches, in step order."""

    def __init__(self, folder: str):
        plan = layout.read_json(f"{folder}/{layout.PLAN}", {})
        self.world_size, self.steps = plan.get("world_size", 0), plan.get("steps", 0)
        self.queue: list[Item] = []
        self.notes: list[str] = []
        self.passes: set[tuple[int, int]] = set()
        self.planned: dict[int, int] = {}  # step -> samples the N ranks trained on
        for step in range(1, self.steps + 1):
            per_rank = []
            for rank in range(self.world_size):
                file = layout.path(folder, layout.RUN, "batches", step, rank)
                try:
                    per_rank.append(layout.load(file))
                except FileNotFoundError:
                    per_rank.append([])
            items, note = items_for_step(step, _interleaved(per_rank), plan.get("micro"),
                                         self.world_size)
            if note and note not in self.notes:
                self.notes.append(note)
            self.queue.extend(items)
            self.planned[step] = sum(sum(i.chunks) for i in items)
            self.passes.update((i.loader, i.pass_number) for i in items)
        ratio = (plan.get("micro") or 1) / (plan.get("ranks_micro") or 1)
        self.lens = {int(k): round(v * ratio) for k, v in plan.get("lens", {}).items()
                     if v is not None}
        self.chunks: list | None = None  # of the batch yielded last
        self.served: dict[int, int] = {}  # step -> samples yielded

    def replays(self, loader: int, pass_number: int) -> bool:
        return (loader, pass_number) in self.passes

    def next_for(self, loader: int, pass_number: int):
        """The next batch of this pass, or None where the N ranks' pass ended here (items of
        an earlier pass of this loader that the reference did not take are dropped)."""
        while self.queue and self.queue[0].loader == loader and \
                self.queue[0].pass_number < pass_number:
            self.queue.pop(0)
        if not self.queue or (self.queue[0].loader, self.queue[0].pass_number) != \
                (loader, pass_number):
            return None
        item = self.queue.pop(0)
        self.chunks = item.chunks
        self.served[item.step] = self.served.get(item.step, 0) + sum(item.chunks)
        return item.batch
