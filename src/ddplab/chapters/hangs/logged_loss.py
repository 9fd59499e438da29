"""The logged loss is one rank's: ``if rank == 0: print(loss)`` shows the loss of rank 0's
``batch_size`` samples, not of the global batch DDP trains on.

Every rank trains the same MLP with SGD on its own rows of each global batch and keeps its own
loss per step; an ``all_reduce`` of the detached losses (SUM, divided by the world size;
``ReduceOp.AVG`` gives the same, on gloo too in torch 2.13) gives the loss of the global batch,
since every rank holds the same number of samples. The reference is one process training on
the whole global batch.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.checks import an_int, int_in_range, positive_int
from ddplab.common.mlp import make_model
from ddplab.common.results import Result
from ddplab.common.threads import one_thread

LAYERS = (8, 32, 1)
LR = 0.05


def make_noisy_batch(batch_size: int, world_size: int, seed: int, step: int):
    """Noisy targets: a few samples per rank give losses that differ from rank to rank."""
    g = torch.Generator().manual_seed(1_000_003 * seed + step)
    X = torch.randn(world_size * batch_size, LAYERS[0], generator=g)
    y = X[:, :1].sin() + torch.randn(world_size * batch_size, 1, generator=g)
    return X, y


# ---------------------------------------------------------------- on every rank


def losses(ctx, steps: int, batch_size: int, seed: int) -> dict:
    model = make_model(LAYERS, seed).to(ctx.device)
    ddp = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    own, mean = [], []
    for step in range(steps):
        X, y = (t[rows].to(ctx.device) for t in make_noisy_batch(batch_size, ctx.world_size, seed,
                                                            step))
        optimizer.zero_grad()
        loss = F.mse_loss(ddp(X), y)
        loss.backward()
        optimizer.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged)  # every rank must join, not only the one that prints
        own.append(loss.item())
        mean.append(logged.item() / ctx.world_size)
    return {"own": own, "mean": mean}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class LoggedLoss(Result):
    world_size: int
    batch_size: int
    steps: int
    rank_losses: np.ndarray  # (world_size, steps): each rank's own loss
    mean_losses: np.ndarray  # (steps,): the all-reduced mean (rank 0's copy)
    reference_losses: np.ndarray  # (steps,): one process on the global batch

    json_extras = ("max_diff_rank0", "max_diff_mean")

    @property
    def max_diff_rank0(self) -> float:
        return float(np.abs(self.rank_losses[0] - self.reference_losses).max())

    @property
    def max_diff_mean(self) -> float:
        return float(np.abs(self.mean_losses - self.reference_losses).max())

    def describe(self) -> str:
        return "\n".join([
            f"{self.world_size} ranks x {self.batch_size} samples, {self.steps} steps",
            f"largest |rank 0's loss - the global batch's|: {self.max_diff_rank0:.3f}",
            f"largest |all-reduced mean - the global batch's|: {self.max_diff_mean:.1e}"])


def reference(world_size: int, batch_size: int, steps: int, seed: int) -> np.ndarray:
    """One process, no DDP, the whole global batch each step."""
    model = make_model(LAYERS, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    out = []
    for step in range(steps):
        X, y = make_noisy_batch(batch_size, world_size, seed, step)
        optimizer.zero_grad()
        loss = F.mse_loss(model(X), y)
        loss.backward()
        optimizer.step()
        out.append(loss.item())
    return np.array(out)


def run(world_size: int = 4, batch_size: int = 4, steps: int = 30, seed: int = 0,
        timeout: float = 60.0) -> LoggedLoss:
    int_in_range("world_size", world_size, 1, ddplab.MAX_WORLD_SIZE)
    for name, value in (("batch_size", batch_size), ("steps", steps)):
        positive_int(name, value)
    an_int("seed", seed)
    results = ddplab.run(losses, world_size, timeout=timeout, steps=steps,
                         batch_size=batch_size, seed=seed)
    rank_losses = np.array([r["own"] for r in results])  # (world_size, steps)
    with one_thread():  # a tiny model: a second thread only waits (common.threads)
        reference_losses = reference(world_size, batch_size, steps, seed)
    return LoggedLoss.from_ranks(results, world_size=world_size, batch_size=batch_size, steps=steps,
                                 rank_losses=rank_losses, mean_losses=np.array(results[0]["mean"]),
                                 reference_losses=reference_losses)
