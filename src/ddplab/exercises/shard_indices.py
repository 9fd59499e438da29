"""Exercise ``shard-indices``: which samples each rank reads, as ``DistributedSampler`` picks
them (``torch/utils/data/distributed.py``, ``DistributedSampler.__iter__``, torch 2.13).

The reader writes ``shard_indices(dataset_len, rank, world_size, epoch, shuffle, drop_last,
seed) -> list[int]``. It passes when it returns the sampler's indices on every case: uneven
lengths, more ranks than samples, later epochs, with and without shuffle and ``drop_last``. The
ranks of the pool each compute a share of the cases, with the sampler itself beside the
reader's function.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data import DistributedSampler

from ddplab.exercises import checker
from ddplab.exercises.record import Exercise

KEYS = ("dataset_len", "world_size", "epoch", "shuffle", "drop_last", "seed")
CASES = [  # (dataset_len, world_size, epoch, shuffle, drop_last, seed)
    (8, 4, 0, False, False, 0), (10, 4, 0, False, False, 0), (10, 4, 0, False, True, 0),
    (3, 5, 0, False, False, 0), (11, 3, 1, True, False, 0), (11, 3, 2, True, True, 0),
    (7, 2, 0, True, False, 42), (7, 2, 3, True, True, 42), (13, 4, 5, True, False, 7),
]


def shard_indices(dataset_len: int, rank: int, world_size: int, epoch: int, shuffle: bool,
                  drop_last: bool, seed: int) -> list[int]:
    """The answer: shuffle with ``seed + epoch``; pad by repeating from the start (or cut the
    tail with ``drop_last``) to a multiple of ``world_size``; take every ``world_size``-th."""
    if shuffle:
        g = torch.Generator()
        g.manual_seed(seed + epoch)
        indices = torch.randperm(dataset_len, generator=g).tolist()
    else:
        indices = list(range(dataset_len))
    if drop_last and dataset_len % world_size:
        per_rank = math.ceil((dataset_len - world_size) / world_size)
    else:
        per_rank = math.ceil(dataset_len / world_size)
    total = per_rank * world_size
    if drop_last:
        indices = indices[:total]
    else:
        indices += (indices * math.ceil(total / dataset_len))[:total - dataset_len]
    return indices[rank:total:world_size]


def cases(world_size: int) -> list[tuple[int, dict]]:
    """One call on the pool's ``world_size`` ranks; they share the cases out."""
    return [(world_size, {})]


def sampler(dataset_len, rank, world_size, epoch, shuffle, drop_last, seed) -> list[int]:
    s = DistributedSampler(range(dataset_len), num_replicas=world_size, rank=rank,
                           shuffle=shuffle, seed=seed, drop_last=drop_last)
    s.set_epoch(epoch)
    return list(s)


def on_rank(ctx, solution, call_id: str) -> list[dict]:
    """Every (case, rank of the case) whose number is this rank's, modulo the pool's size."""
    checks = [(c, r) for c in CASES for r in range(c[1])][ctx.rank::ctx.world_size]
    out = []
    checker.enter(call_id, ctx.rank)
    for case, rank in checks:
        n, w, epoch, shuffle, drop_last, seed = case
        got = solution(n, rank, w, epoch, shuffle, drop_last, seed)
        out.append({"case": dict(zip(KEYS, case)), "rank": rank, "got": got,
                    "want": sampler(n, rank, w, epoch, shuffle, drop_last, seed)})
    checker.leave(call_id, ctx.rank)
    return out


def judge(world_size: int, params: dict, results: list) -> str | None:
    entries = sorted((e for per_rank in results for e in per_rank),
                     key=lambda e: (CASES.index(tuple(e["case"].values())), e["rank"]))
    for entry in entries:
        try:
            entry["got"] = [int(i) for i in entry["got"]]
        except (TypeError, ValueError):
            return f"shard_indices must return a list of ints, got {entry['got']!r}"
    unshuffled_pass = all(e["got"] == e["want"] for e in entries if not e["case"]["shuffle"])
    for entry in entries:
        got, want = entry["got"], entry["want"]
        if got != want:
            case = ", ".join(f"{k}={v}" for k, v in entry["case"].items())
            return (f"case {case}, rank {entry['rank']}: expected {want}, got {got}. "
                    f"{diagnosis(entry['case'], entry['rank'], got, unshuffled_pass)}")
    return None


def diagnosis(case: dict, rank: int, got: list[int], unshuffled_pass: bool = False) -> str:
    """The mistake ``got`` matches, in words, when it matches one; ``unshuffled_pass``: every
    case without shuffle was right."""
    n, w, epoch = case["dataset_len"], case["world_size"], case["epoch"]
    shuffle, drop_last, seed = case["shuffle"], case["drop_last"], case["seed"]
    want = sampler(n, rank, w, epoch, shuffle, drop_last, seed)
    order = sampler(n, 0, 1, epoch, shuffle, False, seed)  # the whole order, unpadded
    per_rank = len(want)
    if shuffle and epoch and got == sampler(n, rank, w, 0, shuffle, drop_last, seed):
        return ("That is epoch 0's order: the sampler shuffles with a generator seeded with "
                "seed + epoch, so each epoch has its own order.")
    if not shuffle and got == sampler(n, rank, w, epoch, True, drop_last, seed):
        return "With shuffle=False the indices are in order: do not shuffle."
    if shuffle and unshuffled_pass and sorted(got) != sorted(want):
        return ("Every case without shuffle passes and this shuffled one does not, so the "
                "padding and striding are right and the order is not: the sampler shuffles with "
                "torch.randperm(dataset_len, generator=g), g = torch.Generator() seeded with "
                "seed + epoch (g.manual_seed(seed + epoch)). Python's random or numpy give "
                "another order for the same seed.")
    if not drop_last and got == order[rank::w]:
        return ("No padding: without drop_last the sampler repeats indices from the start "
                f"until every rank has ceil({n}/{w}) = {per_rank}.")
    if len(got) != per_rank and got == sampler(n, rank, w, epoch, shuffle, not drop_last, seed):
        return (f"That is the answer for drop_last={not drop_last}: with drop_last="
                f"{drop_last} each rank gets {'floor' if drop_last else 'ceil'}({n}/{w}) = "
                f"{per_rank} indices" + (", the tail is dropped." if drop_last else
                                         ", padded by repeating indices from the start."))
    if got == order[rank * per_rank:(rank + 1) * per_rank]:
        return ("That is a contiguous block: the sampler deals indices out in turn, rank r "
                "taking positions r, r + world_size, r + 2 * world_size, ...")
    if shuffle and sorted(got) == sorted(want):
        return ("The right samples in another order: shuffle with torch.randperm(dataset_len, "
                "generator=g) where g = torch.Generator() seeded with seed + epoch.")
    if len(got) != per_rank:
        return f"Expected {per_rank} indices on each rank, got {len(got)}."
    return "Compare with the padded, strided order: indices[rank:total:world_size]."


EXERCISE = Exercise(
    name="shard-indices", lab="labs/02_sharding.ipynb", function="shard_indices",
    signature=("shard_indices(dataset_len, rank, world_size, epoch, shuffle, drop_last, seed)"
               " -> list[int]"),
    against="torch's DistributedSampler",
    answer=shard_indices, cases=cases, on_rank=on_rank, judge=judge, counted=len(CASES))
