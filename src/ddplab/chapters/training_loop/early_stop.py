"""Early stopping, or skipping a step, decided on one rank's numbers: the other ranks wait in
an all-reduce the stopped rank never joins.

    python -m ddplab early-stop --world-size 2 --fix none --timeout 5 --json
    python -m ddplab early-stop --world-size 2 --fix all-reduce --json

Every rank trains the same small MLP on its own batches. At step ``bad_step`` the last rank's
loss is not finite (its batch holds a NaN, as a corrupt sample or an overflow would make it).
The loop stops when the loss is not finite, a rule written for one process:

- ``none``: each rank applies the rule to its own loss. The last rank stops; the others
  back-propagate, and DDP's all-reduce waits for a rank that has left the loop.
- ``all-reduce``: each rank all-reduces its stop flag (MAX) before backward, so every rank
  stops at the same step: the decision is taken together. The same goes for patience (reduce
  the validation loss first) and for skipping one step.

After the loop every rank checks in at a ``monitored_barrier`` (``hang_watch.finish``), which
names the ranks that never arrived; the caller's timeout ends a hang and leaves no process.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddplab.common.checks import an_int, int_in_range, one_of, positive_int
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.results import Result
from ddplab.engine import hang_watch

COMMAND = "early-stop"  # python -m ddplab early-stop

FIXES = ("none", "all-reduce")
LAYERS = (8, 16, 1)
LR = 0.1


def should_stop(loss: torch.Tensor, group=None) -> bool:
    """Stop if the loss is not finite on ANY rank: every rank gets the same answer."""
    # on the loss's device: an NCCL group all-reduces only tensors on its GPU
    flag = torch.tensor([0.0 if torch.isfinite(loss) else 1.0], device=loss.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return bool(flag.item())


# ---------------------------------------------------------------- on every rank


def train(ctx, call_id: str, steps: int, bad_step: int, fix: str, batch_size: int, seed: int,
          check_in_seconds: float) -> dict:
    """Train up to ``steps`` steps; stop when the loss is not finite (see ``fix``)."""
    work, watch = hang_watch.work_groups(check_in_seconds)
    model = make_model(LAYERS, seed).to(ctx.device)
    ddp = DDP(model, process_group=work)  # keep a reference until backward is done
    hang_watch.watch_ddp(call_id, ctx.rank, ddp)  # where it waits, while it hangs
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    stopped_at, done = None, 0
    for step in range(steps):
        batch = make_batch(LAYERS, batch_size, ctx.world_size, seed, step)
        X, y = (t[rows].to(ctx.device) for t in batch)
        if step == bad_step and ctx.rank == ctx.world_size - 1:
            X[0, 0] = float("nan")
        loss = F.mse_loss(ddp(X), y)
        stop = (should_stop(loss, work) if fix == "all-reduce"
                else not bool(torch.isfinite(loss)))
        if stop:
            stopped_at = step
            hang_watch.note(call_id, ctx.rank, stopped_at=step)
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        done += 1
        hang_watch.note(call_id, ctx.rank, step=step)
    hang_watch.finish(call_id, ctx.rank, work, watch, check_in_seconds)
    return {"stopped_at": stopped_at, "steps": done}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class EarlyStop(Result):
    """How a run with one rank's non-finite loss ended."""

    world_size: int
    fix: str
    timeout: float
    bad_step: int
    outcome: str  # "finished" or "hung"
    seconds: float
    stopped_at_step_per_rank: list[int | None]  # None: never stopped (finished all, or hung)
    steps_completed_per_rank: list[int]
    missing_ranks: list[int]
    check_in_messages: list[str | None]
    error: str | None

    def describe(self) -> str:
        lines = [f"fix {self.fix!r}, world size {self.world_size}: {self.outcome} after "
                 f"{self.seconds:.1f} s (timeout {self.timeout:g} s)",
                 f"stopped at step, per rank: {self.stopped_at_step_per_rank}; steps "
                 f"completed: {self.steps_completed_per_rank}"]
        if self.missing_ranks:
            lines.append(f"monitored_barrier named missing ranks: {self.missing_ranks}")
        return "\n".join(lines)


def run(world_size: int = 2, fix: str = "none", steps: int = 4, bad_step: int = 1,
        batch_size: int = 4, seed: int = 0, timeout: float = 60.0) -> EarlyStop:
    """Train with the last rank's loss not finite at ``bad_step``; "hung" if it never ends."""
    one_of("fix", fix, FIXES)
    int_in_range("world_size", world_size, 2, 64)
    positive_int("steps", steps)
    int_in_range("bad_step", bad_step, 0, steps - 1)
    positive_int("batch_size", batch_size)
    an_int("seed", seed)
    watched = hang_watch.run_watched(
        train, world_size, timeout, steps=steps, bad_step=bad_step, fix=fix,
        batch_size=batch_size, seed=seed, check_in_seconds=max(0.5, timeout / 2))
    # a finished run reports itself; a hung one is read from the ranks' notes (the pool's logs)
    if watched.results is not None:
        stopped = [r["stopped_at"] for r in watched.results]
        completed = [r["steps"] for r in watched.results]
    else:
        stopped = [next((n["stopped_at"] for n in notes if "stopped_at" in n), None)
                   for notes in watched.notes]
        completed = watched.steps_completed_per_rank
    return EarlyStop.from_ranks(
        watched,
        world_size=world_size, fix=fix, timeout=timeout, bad_step=bad_step,
        outcome=watched.outcome, seconds=watched.seconds, stopped_at_step_per_rank=stopped,
        steps_completed_per_rank=completed,
        missing_ranks=hang_watch.missing_ranks(watched.check_in_messages),
        check_in_messages=watched.check_in_messages, error=watched.error)


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--fix", choices=FIXES, default="none")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--bad-step", type=int, default=1,
                        help="the step at which the last rank's loss is NaN (default 1)")
    parser.add_argument("--batch-size", type=int, default=4, help="samples per rank")
    parser.add_argument("--seed", type=int, default=0)
