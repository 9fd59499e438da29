"""Check that the process group is real: every rank reports where it runs and all-reduces its rank.

    python -m ddplab check --world-size 4
    torchrun --nproc-per-node 4 -m ddplab check

The all-reduced sum of the ranks 0..N-1 must be N(N-1)/2 on every rank. The module also holds
``ddp_step``, one tiny DDP training step, which the tests and the pool benchmark run.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.results import Result

COMMAND = "check"  # python -m ddplab check


def report(ctx) -> dict:
    """Runs on every rank: where am I, and what is the all-reduced sum of all ranks?"""
    rank_sum = torch.tensor([ctx.rank], dtype=torch.int64, device=ctx.device)
    dist.all_reduce(rank_sum)
    return {"rank": ctx.rank, "local_rank": ctx.local_rank, "world_size": ctx.world_size,
            "backend": ctx.backend, "device": str(ctx.device), "host": ctx.host,
            "pid": os.getpid(), "rank_sum": int(rank_sum.item())}


@dataclasses.dataclass
class FirstGroup(Result):
    """Every rank's report, and whether each all-reduced sum is N(N-1)/2."""

    world_size: int
    expected_rank_sum: int
    ok: bool  # every rank's all-reduced sum is expected_rank_sum
    ranks: list[dict]  # what ``report`` returned on each rank, in rank order

    def describe(self) -> str:
        columns = ["rank", "local_rank", "world_size", "backend", "device", "host", "pid",
                   "rank_sum"]
        rows = [columns] + [[str(r[c]) for c in columns] for r in self.ranks]
        widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
        n = self.world_size
        verdict = "OK" if self.ok else "MISMATCH"
        lines.append(f"all-reduced sum of ranks 0..{n - 1}: expected {n}*{n - 1}/2 = "
                     f"{self.expected_rank_sum} on every rank: {verdict}")
        return "\n".join(lines)


def run(world_size: int, timeout: float = 60.0) -> FirstGroup:
    """Run ``report`` on every rank and check the sums against N(N-1)/2."""
    reports = ddplab.run(report, world_size, timeout=timeout)
    n = len(reports)
    expected = n * (n - 1) // 2
    return FirstGroup.from_ranks(reports, world_size=n, expected_rank_sum=expected,
                                 ok=all(r["rank_sum"] == expected for r in reports), ranks=reports)


LAYERS = (16, 4)  # ddp_step's model: mlp.make_model(LAYERS, seed), one Linear(16, 4)


def ddp_step(ctx, batch_size: int = 8, seed: int = 0) -> dict:
    """One DDP forward/backward with a mean loss; returns this rank's batch and DDP's grads."""
    model = make_model(LAYERS, seed).to(ctx.device)
    ddp = DDP(model, device_ids=[ctx.device] if ctx.device.type == "cuda" else None)
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    X, y = (t[rows] for t in make_batch(LAYERS, batch_size, ctx.world_size, seed, 0))
    F.mse_loss(ddp(X.to(ctx.device)), y.to(ctx.device)).backward()
    return {"X": X, "y": y, "grads": {n: p.grad for n, p in model.named_parameters()}}


def latency(world_sizes, repeats: int = 10) -> list[dict]:
    """Seconds for the first DDP step at each world size and the median of the next ones."""
    rows = []
    for world_size in world_sizes:
        times = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            ddplab.run(ddp_step, world_size)
            times.append(time.perf_counter() - start)
        rows.append({"world_size": world_size, "first_s": times[0],
                     "warm_median_ms": 1e3 * statistics.median(times[1:])})
    return rows
