"""Exercise ``equal-batches``: uneven inputs without the hang.

When one rank has more batches than another, its extra backward waits in an all-reduce that no
other rank joins, and the run hangs (the hangs chapter, "Uneven inputs"). The reader writes
``train_epoch_equal_count(ddp, optimizer, loader)``: one epoch of the usual loop (``zero_grad``,
the mean-squared error of ``ddp(X)`` against ``y``, ``backward``, ``step``) over at most as
many batches as the rank with the fewest has, so that every rank takes the same number of
steps. The answer all-reduces ``len(loader)`` with ``ReduceOp.MIN``.

Each case gives the ranks their own numbers of batches: each rank's loader holds its rows of
the first global batches (hand-sharded, as an iterable or a hand-split dataset gives them). The
checker counts every optimizer step (a step hook) and passes the solution when every rank
returned, every rank took as many steps as the fewest batches, and every rank's parameters
equal one process's after as many SGD steps on the whole global batches (mean loss). Every rank
computes that reference itself, before the reader's code: no collective follows the reader's.
A hang is ended by the caller's timeout; the ranks' notes (each count all-reduce the reader
started, with its operation, and each step) say what went wrong (:func:`explain`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

from ddplab.common.mlp import make_batch, make_model
from ddplab.engine import hang_watch
from ddplab.exercises import checker
from ddplab.exercises.record import Exercise

LAYERS = (8, 16, 4)
BATCH_SIZE = 4  # samples per rank and batch
LR = 0.1
NOTED_VALUES = 8  # an all-reduce of more elements is not a count: its values are not noted


def train_epoch_equal_count(ddp, optimizer, loader) -> None:
    """The answer: every rank all-reduces its number of batches with MIN, then trains on that
    many of its own (``zip`` stops at the shorter of the two)."""
    count = torch.tensor(len(loader), device=next(ddp.parameters()).device)
    dist.all_reduce(count, op=dist.ReduceOp.MIN, group=ddp.process_group)
    for _, (X, y) in zip(range(int(count)), loader):
        optimizer.zero_grad()
        F.mse_loss(ddp(X), y).backward()
        optimizer.step()


def cases(world_size: int) -> list[tuple[int, dict]]:
    """(world size, parameters): the last rank with one batch more; equal counts; one more rank,
    the first with one batch more; a rank with a single batch beside one with four."""
    return [(world_size, {"counts": [2] * (world_size - 1) + [3], "seed": 0}),
            (world_size, {"counts": [2] * world_size, "seed": 1}),
            (world_size + 1, {"counts": [3] + [2] * world_size, "seed": 2}),
            (world_size + 1, {"counts": [1, 4] + [2] * (world_size - 1), "seed": 3})]


def rank_loader(ctx, batches: int, seed: int) -> DataLoader:
    """This rank's rows of the first ``batches`` global batches, ``BATCH_SIZE`` rows a batch."""
    mine = slice(ctx.rank * BATCH_SIZE, (ctx.rank + 1) * BATCH_SIZE)
    parts = [make_batch(LAYERS, BATCH_SIZE, ctx.world_size, seed, i) for i in range(batches)]
    return DataLoader(TensorDataset(torch.cat([X[mine] for X, _ in parts]).to(ctx.device),
                                    torch.cat([y[mine] for _, y in parts]).to(ctx.device)),
                      batch_size=BATCH_SIZE)


def one_process(world_size: int, steps: int, seed: int, zero_grad: bool = True) -> dict:
    """The parameters after ``steps`` SGD steps on the whole global batches (mean loss) in one
    process; with ``zero_grad=False``, gradients left to add up from step to step."""
    model = make_model(LAYERS, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for i in range(steps):
        if zero_grad:
            optimizer.zero_grad()
        X, y = make_batch(LAYERS, BATCH_SIZE, world_size, seed, i)
        F.mse_loss(model(X), y).backward()
        optimizer.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def note_allreduce(call_id: str, rank: int):
    """For :func:`checker.watching_allreduce`: note each all-reduce's operation, and its values
    when they are few (a count), in this rank's log: a hung rank's notes still reach the
    caller."""

    def see(tensors, *args, **kwargs):
        opts = args[0] if args else kwargs.get("opts")
        op = getattr(getattr(opts, "reduceOp", None), "op", None)
        first = tensors[0] if isinstance(tensors, (list, tuple)) else tensors
        values = first.flatten().tolist() if first.numel() <= NOTED_VALUES else None
        hang_watch.note(call_id, rank, allreduce=getattr(op, "name", str(op)), values=values)

    return see


def on_rank(ctx, solution, call_id: str, counts: list[int], seed: int) -> dict:
    """This rank's steps and parameters after ``solution``, beside one process's reference."""
    fewest = min(counts)
    want = one_process(ctx.world_size, fewest, seed)
    no_zero_grad = one_process(ctx.world_size, fewest, seed, zero_grad=False)
    model = make_model(LAYERS, seed).to(ctx.device)
    ddp = DDP(model)  # on the pool's group, formed before the reader's code
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    steps = []

    def count_step(optimizer, args, kwargs):
        steps.append(len(steps) + 1)
        hang_watch.note(call_id, ctx.rank, step=len(steps))

    optimizer.register_step_post_hook(count_step)
    loader = rank_loader(ctx, counts[ctx.rank], seed)
    checker.enter(call_id, ctx.rank)
    with checker.watching_allreduce(note_allreduce(call_id, ctx.rank)):
        solution(ddp, optimizer, loader)
    checker.leave(call_id, ctx.rank)
    return {"steps": len(steps), "want": want, "no_zero_grad": no_zero_grad,
            "got": {n: p.detach() for n, p in model.named_parameters()}}


def explain(world_size: int, params: dict, outcome) -> str | None:
    """After a hang or a raise: the problem, then the count all-reduces each rank started, in
    words (None: nothing to add)."""
    words = _noted(world_size, params, outcome.notes)
    if words is None:
        return None
    return outcome.problem + ("\n" if "\n" in outcome.problem else " ") + words


def _noted(world_size: int, params: dict, notes: list[list[dict]]) -> str | None:
    """The count all-reduces each rank started, in words."""
    if not any("entered" in n for rank_notes in notes for n in rank_notes):
        return None  # it ended before the reader's code began
    counts = params["counts"]
    fewest = min(counts)
    more = checker.ranks_text([r for r in range(world_size) if counts[r] > fewest])
    firsts = [next((n for n in rank_notes if "allreduce" in n), None) for rank_notes in notes]
    called = [r for r in range(world_size) if firsts[r] is not None]
    if not called:
        return (f"No rank all-reduced its number of batches (batches per rank {counts}), so "
                f"every rank ran its whole loader and the extra backward of {more} waited "
                "for the others: all-reduce len(loader) with ReduceOp.MIN and take that many.")
    if len(called) < world_size:
        never = [r for r in range(world_size) if r not in called]
        return (f"Only {checker.ranks_text(called)} all-reduced the number of batches; "
                f"{checker.ranks_text(never)} never did, so the all-reduce met DDP's gradient "
                "all-reduce instead. Every rank must call it, not only rank 0.")
    values = [firsts[r]["values"] for r in range(world_size)]
    if values != [[c] for c in counts]:
        return (f"The ranks all-reduced {values}, not their numbers of batches {counts}: "
                "len(loader) counts batches (len(loader.dataset) counts samples).")
    op = firsts[0]["allreduce"]
    if op == "SUM":
        return (f"The batch counts {counts} were all-reduced with SUM: every rank got "
                f"{sum(counts)}, more than any rank has, so every rank ran its whole loader. "
                "Take the MIN: the fewest batches of any rank.")
    if op == "MAX":
        return (f"The batch counts {counts} were all-reduced with MAX: every rank got "
                f"{max(counts)}, so the ranks with fewer ran out while {more} went on. Take "
                f"the MIN: {fewest}.")
    if op != "MIN":
        return f"The batch counts {counts} were all-reduced with {op}: take the MIN, {fewest}."
    return (f"The batch counts {counts} were all-reduced with MIN (every rank got {fewest}), "
            f"but {more} still went on past {fewest} batches: train on only the first "
            f"{fewest} (itertools.islice, or zip with range).")


def judge(world_size: int, params: dict, results: list) -> str | None:
    counts = params["counts"]
    fewest = min(counts)
    where = f"world size {world_size}, batches per rank {counts}"
    steps = [r["steps"] for r in results]
    if len(set(steps)) > 1:
        most, least = int(np.argmax(steps)), int(np.argmin(steps))
        return (f"{where}: rank {most} took {steps[most]} steps and rank {least} took "
                f"{steps[least]}: every rank must take as many as the fewest batches "
                f"({fewest}). Steps that only some ranks take do not go through DDP's "
                "all-reduce together, and the ranks' parameters drift apart.")
    if steps[0] != fewest:
        return (f"{where}: every rank took {steps[0]} optimizer steps; the fewest batches of "
                f"any rank is {fewest}: train on exactly that many, the MIN of len(loader) "
                "over the ranks.")
    for rank, result in enumerate(results):
        for name, got in result["got"].items():
            if not np.allclose(got, results[0]["got"][name], rtol=1e-4, atol=1e-6):
                return (f"{where}: after {fewest} steps the parameter {name!r} on rank {rank} "
                        "differs from rank 0's: the gradients were never averaged. Run "
                        "forward through ddp (not ddp.module), so that backward all-reduces.")
    for rank, result in enumerate(results):
        for name, want in result["want"].items():
            got = result["got"][name]
            if np.allclose(got, want, rtol=1e-4, atol=1e-6):
                continue
            head = (f"{where}: after {fewest} steps the parameter {name!r} on rank {rank} "
                    "differs from one process's on the whole global batches")
            if np.allclose(got, result["no_zero_grad"][name], rtol=1e-4, atol=1e-6):
                return (f"{head}: the gradients added up from step to step; call "
                        "optimizer.zero_grad() before each backward.")
            error = float(np.max(np.abs(got - want)))
            return (f"{head} by up to {error:.3g}: the loss is F.mse_loss(ddp(X), y), then "
                    "backward and optimizer.step().")
    return None


EXERCISE = Exercise(
    name="equal-batches", lab="labs/06_hangs.ipynb", function="train_epoch_equal_count",
    signature="train_epoch_equal_count(ddp, optimizer, loader)",
    against=("one process on the whole global batches, every rank taking as many steps as the "
             "fewest batches"),
    answer=train_epoch_equal_count, cases=cases, on_rank=on_rank, judge=judge, explain=explain)
