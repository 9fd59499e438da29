"""A collective on rank 0 only: evaluation under ``if rank == 0:`` through the DDP model.

    python -m ddplab rank0-collective --world-size 2 --fix none --timeout 5 --json
    python -m ddplab rank0-collective --world-size 2 --fix module --json

Every rank trains a small model with a BatchNorm layer for ``steps`` steps; then rank 0 alone
evaluates it, under ``torch.no_grad()``. Through ``ddp`` (``fix="none"``) that forward is a
collective: DDP broadcasts rank 0's buffers (BatchNorm's running statistics) to every rank
before each forward that follows a training forward (``_pre_forward`` -> ``_sync_buffers`` in
``torch/nn/parallel/distributed.py``, with ``forward_sync_buffers=True``, the default; the
flag was ``broadcast_buffers`` before torch 2.13), and no
other rank joins it. Through ``ddp.module`` (``fix="module"``) it is a plain local forward.

A model without buffers would not hang here: its no-grad forward communicates nothing once
the buckets are rebuilt. The hang comes from the buffers, which most real models have.

After that every rank checks in at a ``monitored_barrier`` (``hang_watch.finish``); the
ranks that arrive name rank 0, the one that never did.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddplab.common.checks import an_int, int_in_range, one_of, positive_int
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.results import Result
from ddplab.engine import hang_watch

COMMAND = "rank0-collective"  # python -m ddplab rank0-collective

FIXES = ("none", "module")
FEATURES = 8
# the model's widths and the batches' input and target (ddplab.common.mlp), trained with a
# BatchNorm1d after the hidden layer: its running mean and variance are buffers
LAYERS = (FEATURES, 16, 1)
NORM = torch.nn.BatchNorm1d


# ---------------------------------------------------------------- on every rank


def evaluate(model, X, y) -> float:
    """The loss on (X, y) in eval mode, without gradients."""
    model.eval()
    with torch.no_grad():
        loss = F.mse_loss(model(X), y).item()
    model.train()
    return loss


def evaluate_on_rank0(ddp, rank: int, X, y) -> float | None:
    """Rank 0 evaluates alone, through ``ddp.module``: a plain forward that
    communicates nothing. Through ``ddp`` it would wait for the others."""
    return evaluate(ddp.module, X, y) if rank == 0 else None


def train_then_evaluate(ctx, call_id: str, fix: str, steps: int,
                        batch_size: int, seed: int,
                        check_in_seconds: float) -> dict:
    work, watch = hang_watch.work_groups(check_in_seconds)
    model = make_model(LAYERS, seed, norm=NORM).to(ctx.device)
    ddp = DDP(model, process_group=work)
    hang_watch.watch_ddp(call_id, ctx.rank, ddp)  # where it waits, while it hangs
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    for step in range(steps):
        batch = make_batch(LAYERS, batch_size, ctx.world_size, seed, step)
        X, y = (t[rows].to(ctx.device) for t in batch)
        optimizer.zero_grad()
        F.mse_loss(ddp(X), y).backward()
        optimizer.step()
        hang_watch.note(call_id, ctx.rank, step=step)
    X_val, y_val = (t.to(ctx.device) for t in make_batch(LAYERS, 64, 1, seed, -1))
    if fix == "module":
        val_loss = evaluate_on_rank0(ddp, ctx.rank, X_val, y_val)
    else:  # the mistake: rank 0 alone calls the DDP model
        val_loss = evaluate(ddp, X_val, y_val) if ctx.rank == 0 else None
    if ctx.rank == 0:
        hang_watch.note(call_id, ctx.rank, val_loss=val_loss)
    hang_watch.finish(call_id, ctx.rank, work, watch, check_in_seconds)
    return {"val_loss": val_loss}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class Rank0Collective(Result):
    """How a run whose rank 0 evaluates alone ended."""

    world_size: int
    fix: str
    timeout: float
    outcome: str  # "finished" or "hung"
    seconds: float
    steps_completed_per_rank: list[int]
    missing_ranks: list[int]  # as monitored_barrier named them
    check_in_messages: list[str | None]
    val_loss: float | None  # rank 0's evaluation, when it finished
    error: str | None

    def describe(self) -> str:
        evaluated = "ddp" if self.fix == "none" else "ddp.module"
        lines = [f"rank 0 evaluates through {evaluated}, world size {self.world_size}: "
                 f"{self.outcome}\n  after {self.seconds:.1f} s (timeout {self.timeout:g} s)",
                 f"training steps completed per rank: {self.steps_completed_per_rank}"]
        lines += hang_watch.message_lines(self.check_in_messages, self.missing_ranks)
        if self.val_loss is not None:
            lines.append(f"rank 0's validation loss: {self.val_loss:.4f}")
        return "\n".join(lines)


def run(world_size: int = 2, fix: str = "none", steps: int = 2, batch_size: int = 8,
        seed: int = 0, timeout: float = 60.0) -> Rank0Collective:
    """Train, then evaluate on rank 0 only; "hung" if the evaluation never returns."""
    one_of("fix", fix, FIXES)
    int_in_range("world_size", world_size, 2, 64)
    positive_int("steps", steps)
    int_in_range("batch_size", batch_size, 2, 4096)  # BatchNorm needs 2 samples to train
    an_int("seed", seed)
    watched = hang_watch.run_watched(
        train_then_evaluate, world_size, timeout, fix=fix, steps=steps,
        batch_size=batch_size, seed=seed, check_in_seconds=max(0.5, timeout / 2))
    return Rank0Collective.from_ranks(
        watched,
        world_size=world_size, fix=fix, timeout=timeout, outcome=watched.outcome,
        seconds=watched.seconds,
        steps_completed_per_rank=watched.steps_completed_per_rank,
        missing_ranks=hang_watch.missing_ranks(watched.check_in_messages),
        check_in_messages=watched.check_in_messages,
        val_loss=None if watched.results is None else watched.results[0]["val_loss"],
        error=watched.error)


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--fix", choices=FIXES, default="none",
                        help="none: rank 0 evaluates through ddp; module: through ddp.module")
    parser.add_argument("--steps", type=int, default=2, help="training steps before evaluating")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per rank")
    parser.add_argument("--seed", type=int, default=0)
