"""Printing under DDP: every rank runs the loop, so a ``print`` written for one process prints
once per rank, each rank its own loss.

Every rank trains the same MLP with SGD on its own rows of each global batch and prints one line
per step, three ways:

- ``every-rank``: the loop as written for one process; every rank prints the loss of its own
  ``batch_size`` samples: ``world_size`` lines per step, with ``world_size`` different numbers.
- ``rank-0``: ``if rank == 0: print(...)``: one line per step, but of rank 0's samples only.
- ``rank-0-all-reduced``: every rank joins one ``all_reduce`` of its detached loss (SUM, then
  divided by the world size: every rank holds as many samples), and rank 0 prints it: one line
  per step, the loss of the global batch, which one process on the whole batch computes.

A rank's output goes to its log file. The caller reads back what each rank printed from
``ddplab.logs()``: the lines between two notes (``hang_watch.note``) that carry this call's id,
one before each way's loop and one after it, so lines of other calls are never counted. The
reference is one process, no DDP, training on the whole global batch.

There is no CLI command: under torchrun the ranks print to the launcher's terminal (which shows
the ``every-rank`` copies for itself), and there are no pool logs to read back.
"""

from __future__ import annotations

import dataclasses
import re
import uuid

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.checks import an_int, int_in_range, positive_int
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.results import Result
from ddplab.common.threads import one_thread
from ddplab.engine import hang_watch, notes

LAYERS = (8, 16, 1)
LR = 0.1
LINE = re.compile(r"step (\d+): loss (\S+)$")  # what every printer below prints


def print_every_rank(step: int, loss: torch.Tensor) -> None:
    """Written for one process: under DDP every rank prints, each its own loss."""
    print(f"step {step}: loss {loss.item():.6f}")


def print_rank_0(step: int, loss: torch.Tensor) -> None:
    """One line per step, but rank 0's own loss: the loss of its ``batch_size`` samples."""
    if dist.get_rank() == 0:
        print(f"step {step}: loss {loss.item():.6f}")


def print_global_loss(step: int, loss: torch.Tensor) -> None:
    """One line per step, the loss of the global batch: every rank all-reduces, rank 0 prints."""
    total = loss.detach().clone()
    dist.all_reduce(total)  # on every rank, outside the if: a collective on rank 0 alone hangs
    if dist.get_rank() == 0:
        print(f"step {step}: loss {total.item() / dist.get_world_size():.6f}")


PRINTERS = {"every-rank": print_every_rank, "rank-0": print_rank_0,
            "rank-0-all-reduced": print_global_loss}
WAYS = tuple(PRINTERS)


# ---------------------------------------------------------------- on every rank


def train_and_print(ctx, call_id: str, steps: int, batch_size: int, seed: int) -> dict:
    """Train ``steps`` SGD steps once per way, printing one line per step that way."""
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    for way, printer in PRINTERS.items():
        model = make_model(LAYERS, seed).to(ctx.device)
        ddp = DDP(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        hang_watch.note(call_id, ctx.rank, printing=way)
        for step in range(steps):
            batch = make_batch(LAYERS, batch_size, ctx.world_size, seed, step)
            X, y = (t[rows].to(ctx.device) for t in batch)
            loss = F.mse_loss(ddp(X), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            printer(step, loss)
        hang_watch.note(call_id, ctx.rank, printing=None)
    return {"rank": ctx.rank}


# ---------------------------------------------------------------- in the caller


def printed_lines(call_id: str, world_size: int) -> dict[str, list[list[str]]]:
    """Per way, per rank, the step lines that rank printed during call ``call_id``."""
    printed = {way: [[] for _ in range(world_size)] for way in WAYS}
    for rank, text in enumerate(ddplab.logs()[:world_size]):
        way = None
        for line in text.splitlines():
            entry = notes.parse(line)
            if entry:
                way = entry.get("printing") if entry["call"] == call_id else None
            elif way is not None and LINE.match(line):
                printed[way][rank].append(line)
    return printed


@dataclasses.dataclass
class Printing(Result):
    """What each rank printed, each way, against one process's loss at each step."""

    world_size: int
    batch_size: int
    steps: int
    printed: dict[str, list[list[str]]]  # way -> per rank, the lines read from its log
    losses_one_process: list[float]  # per step, one process on the global batch

    json_extras = ("lines_per_rank", "max_diff_vs_one_process")

    @property
    def lines_per_rank(self) -> dict[str, list[int]]:
        return {way: [len(lines) for lines in ranks] for way, ranks in self.printed.items()}

    def losses(self, way: str) -> list[list[float]]:
        """Per rank, the losses it printed that way, read back from its lines."""
        return [[float(LINE.match(line).group(2)) for line in lines]
                for lines in self.printed[way]]

    @property
    def max_diff_vs_one_process(self) -> dict[str, float]:
        """Per way, the largest |printed loss - one process's loss at that step|."""
        reference = np.array(self.losses_one_process)
        return {way: max((float(np.abs(np.array(losses) - reference).max())
                          for losses in self.losses(way) if losses), default=float("nan"))
                for way in self.printed}

    def _printed(self, way: str, rank: int, step: int) -> str:
        losses = self.losses(way)[rank]
        return f"{losses[step]:.6f}" if step < len(losses) else "-"

    def describe(self) -> str:
        W, width = self.world_size, max(map(len, WAYS))
        counts = {way: str(n) for way, n in self.lines_per_rank.items()}
        column = max(len("lines per rank"), *map(len, counts.values()))
        lines = [f"{W} ranks x {self.batch_size} samples, {self.steps} steps",
                 f"  {'printed':<{width}}  {'lines per rank':<{column}}  "
                 f"largest |printed - one process's loss|"]
        lines += [f"  {way:<{width}}  {counts[way]:<{column}}  "
                  f"{self.max_diff_vs_one_process[way]:.1e}" for way in WAYS]
        ranks = max(10 * W - 2, len("every-rank"))
        lines += ["The losses printed at each step (every-rank: one column per rank):",
                  f"  step  {'every-rank':<{ranks}}  rank-0    rank-0-all-reduced  one process"]
        for step in range(self.steps):
            every = "  ".join(self._printed("every-rank", rank, step) for rank in range(W))
            lines.append(f"  {step:>4}  {every:<{ranks}}  {self._printed('rank-0', 0, step):<8}"
                         f"  {self._printed('rank-0-all-reduced', 0, step):<18}  "
                         f"{self.losses_one_process[step]:.6f}")
        return "\n".join(lines)


def one_process(world_size: int, batch_size: int, steps: int, seed: int) -> list[float]:
    """The loss at each step of one process, no DDP, on the whole global batch."""
    model = make_model(LAYERS, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step in range(steps):
        X, y = make_batch(LAYERS, batch_size, world_size, seed, step)
        loss = F.mse_loss(model(X), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def run(world_size: int = 3, steps: int = 3, batch_size: int = 4, seed: int = 0,
        timeout: float = 60.0) -> Printing:
    """Train and print each way on ``world_size`` ranks; read back what every rank printed."""
    int_in_range("world_size", world_size, 1, ddplab.MAX_WORLD_SIZE)
    int_in_range("steps", steps, 1, 100)
    positive_int("batch_size", batch_size)
    an_int("seed", seed)
    call_id = uuid.uuid4().hex
    ranks = ddplab.run(train_and_print, world_size, timeout=timeout,
                       call_id=call_id, steps=steps, batch_size=batch_size, seed=seed)
    with one_thread():  # a tiny model: a second thread only waits (common.threads)
        losses = one_process(world_size, batch_size, steps, seed)
    return Printing.from_ranks(ranks, world_size=world_size, batch_size=batch_size, steps=steps,
                               printed=printed_lines(call_id, world_size),
                               losses_one_process=losses)
