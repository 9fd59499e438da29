"""Rank 0 busy alone (saving a checkpoint, evaluating) for longer than the group's timeout,
while the other ranks wait for it in the next step's all-reduce.

This is the commonest cause of NCCL's "Watchdog caught collective operation timeout": nobody
skipped a collective, rank 0 only came to it late. NCCL's watchdog times each collective
against the group's timeout (``init_process_group(timeout=...)``, 10 minutes by default for
NCCL, ``kProcessGroupNCCLDefaultTimeout`` in ``ProcessGroupNCCL.hpp``); gloo applies the same
timeout to each of its operations, and the waiting rank's all-reduce raises "Timed out waiting
...ms for recv operation to complete" (``gloo/transport/tcp/unbound_buffer.cc``). So the
mechanism runs here on CPU ranks, small: a group with a timeout of about a second, and rank 0
asleep for two between two steps.

Every rank trains a one-layer model for ``steps`` steps under DDP on a group of its own,
formed with ``group_timeout``; after every step but the last, rank 0 sleeps ``busy_seconds``.
Each rank returns the steps it finished and the error it got (None when it finished). A group
timeout longer than rank 0's solo work (the fix) lets every rank finish.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.checks import int_at_least, int_in_range, positive_number
from ddplab.common.mlp import make_batch
from ddplab.common.results import Result

# gloo's errors start with their source: "[/path/to/unbound_buffer.cc:78] Timed out ..."
GLOO_SOURCE = re.compile(r"^\[[^\]]*?([^/\]]+:\d+)\] ")
LAYERS = (4, 1)  # one Linear layer: the model does not matter, the waiting does
BATCH_SIZE = 8


def busy_on_rank0(rank: int, busy_seconds: float) -> None:
    """Rank 0's solo work between two steps (a checkpoint written, a validation pass): the
    other ranks go on and wait for rank 0 in the next step's all-reduce."""
    if rank == 0:
        time.sleep(busy_seconds)


def train_with_busy_rank0(ctx, busy_seconds: float, group_timeout: float, steps: int) -> dict:
    # A group of our own: the pool's main group carries whichever timeout formed it.
    group = dist.new_group(timeout=datetime.timedelta(seconds=group_timeout))
    torch.manual_seed(0)
    ddp = DDP(torch.nn.Linear(*LAYERS).to(ctx.device), process_group=group)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    rows = slice(ctx.rank * BATCH_SIZE, (ctx.rank + 1) * BATCH_SIZE)
    finished, error, started = 0, None, time.perf_counter()
    try:
        for step in range(steps):
            X, y = (t[rows].to(ctx.device)
                    for t in make_batch(LAYERS, BATCH_SIZE, ctx.world_size, 0, step))
            optimizer.zero_grad()
            F.mse_loss(ddp(X), y).backward()  # DDP's all-reduce: waits for every rank
            optimizer.step()
            finished += 1
            if step < steps - 1:
                busy_on_rank0(ctx.rank, busy_seconds)
    except RuntimeError as exc:  # gloo's timeout, or "Connection closed" once a peer gave up
        error = str(exc)
    seconds = time.perf_counter() - started
    del ddp
    dist.destroy_process_group(group)  # subgroups must not outlive the call (CONTRIBUTING)
    return {"finished": finished, "error": error, "seconds": seconds}


@dataclasses.dataclass
class BusyRank0(Result):
    """How a run ended whose rank 0 works alone between steps."""

    world_size: int
    busy_seconds: float
    group_timeout: float
    steps: int
    steps_finished_per_rank: list[int]
    error_per_rank: list[str | None]
    seconds_per_rank: list[float]

    @property
    def timed_out(self) -> bool:
        return any(error is not None for error in self.error_per_rank)

    def describe(self) -> str:
        lines = [f"rank 0 busy {self.busy_seconds:g} s between steps, group timeout "
                 f"{self.group_timeout:g} s, world size {self.world_size}: "
                 + ("timed out" if self.timed_out else "finished")]
        for rank, (done, error) in enumerate(zip(self.steps_finished_per_rank,
                                                 self.error_per_rank)):
            lines.append(f"  rank {rank}: {done} of {self.steps} steps"
                         + ("" if error is None else ", then, from " + short(error)))
        return "\n".join(lines)


def short(error: str) -> str:
    """A gloo error's first sentence, its source file named without the build's path."""
    first = GLOO_SOURCE.sub(lambda m: f"{m.group(1)}:\n    ", error.splitlines()[0])
    return first.split(". ")[0]


def run(world_size: int = 2, busy_seconds: float = 2.0, group_timeout: float = 1.0,
        steps: int = 2) -> BusyRank0:
    world_size = int_in_range("world_size", world_size, 2, 8)
    busy_seconds = positive_number("busy_seconds", busy_seconds)
    group_timeout = positive_number("group_timeout", group_timeout)
    steps = int_at_least("steps", steps, 2, "rank 0 is busy between two steps")
    per_rank = ddplab.run(train_with_busy_rank0, world_size=world_size,
                          busy_seconds=busy_seconds, group_timeout=group_timeout, steps=steps,
                          timeout=steps * (busy_seconds + group_timeout) + 60)
    return BusyRank0.from_ranks(per_rank, world_size, busy_seconds, group_timeout, steps,
                                [r["finished"] for r in per_rank], [r["error"] for r in per_rank],
                                [r["seconds"] for r in per_rank])
