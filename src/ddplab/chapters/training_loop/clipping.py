"""Gradient clipping under DDP: where to clip, and the two ways to clip the wrong norm.

    python -m ddplab clip --world-size 2 --max-norm 0.5 --json

After ``loss.backward()`` on a DDP model, every rank holds the averaged gradient: the gradient
of one process on the whole batch. ``clip_grad_norm_`` on it returns that process's norm on
every rank, and the clipped step is the one-process step. Two mistakes, both run here:

- ``local``: clipping each rank's own gradient before it is averaged (a hand-written
  all-reduce after clipping, or clipping inside ``no_sync``): each rank scales by its own norm,
  and the average of the clipped gradients is no one-process gradient.
- ``reduced-again``: all-reducing the norm after DDP already averaged the gradients: the
  squared norms of W identical gradients sum to W times the square, so the norm is sqrt(W)
  times too large and the step is clipped sqrt(W) times too hard.

With gradient accumulation (``no_sync`` on all micro-batches but the last), the gradient is
averaged only at the last micro-batch: clip there, after its backward, never before.
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.checks import an_int, int_in_range, positive_int, positive_number
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.results import Result

COMMAND = "clip"  # python -m ddplab clip

LAYERS = (8, 16, 1)
LR = 0.1


def clipped_step(model, optimizer, max_norm: float) -> float:
    """The step to copy: backward is done (DDP averaged the gradients), clip, then step."""
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return float(norm)


def flat_params(model) -> np.ndarray:
    return torch.cat([p.detach().flatten() for p in model.parameters()]).cpu().numpy()


def _global_norm(model) -> torch.Tensor:
    return torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()]))


# ---------------------------------------------------------------- on every rank


def clip_ranks(ctx, max_norm: float, batch_size: int, seed: int) -> dict:
    """One SGD step clipped three ways: DDP's averaged gradient (right), each rank's local
    gradient then averaged (wrong), the averaged gradient with the norm reduced again (wrong)."""
    X, y = make_batch(LAYERS, batch_size, ctx.world_size, seed, 0)
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    X, y = X[rows].to(ctx.device), y[rows].to(ctx.device)
    W = ctx.world_size

    # right: clip after DDP's backward
    model = make_model(LAYERS, seed).to(ctx.device)
    ddp = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    F.mse_loss(ddp(X), y).backward()
    norm = clipped_step(model, optimizer, max_norm)

    # wrong: clip this rank's own gradient, then average by hand
    local = make_model(LAYERS, seed).to(ctx.device)
    F.mse_loss(local(X), y).backward()
    local_norm = float(torch.nn.utils.clip_grad_norm_(local.parameters(), max_norm))
    for p in local.parameters():
        dist.all_reduce(p.grad)
        p.grad /= W
    torch.optim.SGD(local.parameters(), lr=LR).step()

    # wrong: DDP averaged already; all-reducing the squared norm again counts it W times
    again = make_model(LAYERS, seed).to(ctx.device)
    ddp_again = DDP(again)
    F.mse_loss(ddp_again(X), y).backward()
    squared = _global_norm(again) ** 2
    dist.all_reduce(squared)
    norm_again = float(squared.sqrt())
    torch.nn.utils.clip_grads_with_norm_(again.parameters(), max_norm, squared.sqrt())
    torch.optim.SGD(again.parameters(), lr=LR).step()

    return {"norm": norm, "local_norm": local_norm, "norm_again": norm_again,
            "params": flat_params(model), "params_local": flat_params(local),
            "params_again": flat_params(again)}


def accumulation_ranks(ctx, max_norm: float, batch_size: int, micro_batches: int,
                       seed: int) -> dict:
    """Accumulate ``micro_batches`` (``no_sync`` on all but the last), clipping after every
    micro-batch's backward (wrong) or after the last only (right)."""
    X, y = make_batch(LAYERS, batch_size, ctx.world_size, seed, 0)
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    X, y = X[rows].to(ctx.device), y[rows].to(ctx.device)
    chunks = list(zip(X.chunk(micro_batches), y.chunk(micro_batches)))
    out = {}
    for every in (True, False):
        model = make_model(LAYERS, seed).to(ctx.device)
        ddp = DDP(model)
        for i, (xb, yb) in enumerate(chunks):
            last = i == len(chunks) - 1
            with contextlib.nullcontext() if last else ddp.no_sync():
                (F.mse_loss(ddp(xb), yb) / micro_batches).backward()
            if every or last:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        torch.optim.SGD(model.parameters(), lr=LR).step()
        out["every" if every else "last"] = flat_params(model)
    return out


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class Clip(Result):
    """Norms and clipped parameters per rank, against one process on the whole batch."""

    world_size: int
    max_norm: float
    norm_one_process: float
    norm_per_rank: list[float]  # clip_grad_norm_'s return after DDP's backward
    norm_local_per_rank: list[float]  # each rank's own gradient, before the all-reduce
    norm_reduced_again_per_rank: list[float]  # the averaged norm, all-reduced once more
    params_one_process: np.ndarray
    params: np.ndarray  # (world_size, n) after the clipped step
    params_local: np.ndarray  # (world_size, n) clipped locally, then averaged
    params_reduced_again: np.ndarray  # (world_size, n)

    json_extras = ("max_param_diff_vs_one_process", "max_param_diff_local_vs_one_process",
                   "max_param_diff_reduced_again_vs_one_process")

    def _diff(self, params) -> float:
        return float(np.abs(params - self.params_one_process).max())

    @property
    def max_param_diff_vs_one_process(self) -> float:
        return self._diff(self.params)

    @property
    def max_param_diff_local_vs_one_process(self) -> float:
        return self._diff(self.params_local)

    @property
    def max_param_diff_reduced_again_vs_one_process(self) -> float:
        return self._diff(self.params_reduced_again)

    def json_fields(self) -> dict:
        data = super().json_fields()
        for name in ("params_one_process", "params", "params_local", "params_reduced_again"):
            del data[name]
        return data

    def describe(self) -> str:
        norms = ", ".join(f"{n:.4f}" for n in self.norm_local_per_rank)
        return "\n".join([
            f"world size {self.world_size}, max_norm {self.max_norm:g}",
            f"one process's norm:           {self.norm_one_process:.4f}",
            f"after DDP's backward, rank 0: {self.norm_per_rank[0]:.4f}"
            f"  (step off by {self.max_param_diff_vs_one_process:.1e})",
            f"each rank's local norm:       {norms}"
            f"  (step off by {self.max_param_diff_local_vs_one_process:.1e})",
            f"norm reduced again, rank 0:   {self.norm_reduced_again_per_rank[0]:.4f}"
            f"  (step off by {self.max_param_diff_reduced_again_vs_one_process:.1e})"])


def one_process(world_size: int, max_norm: float, batch_size: int, seed: int):
    """(norm, parameters after the clipped step): one process, no DDP, the whole batch."""
    model = make_model(LAYERS, seed)
    X, y = make_batch(LAYERS, batch_size, world_size, seed, 0)
    F.mse_loss(model(X), y).backward()
    norm = clipped_step(model, torch.optim.SGD(model.parameters(), lr=LR), max_norm)
    return norm, flat_params(model)


def run(world_size: int = 2, max_norm: float = 0.5, batch_size: int = 4, seed: int = 0,
        timeout: float = 60.0) -> Clip:
    """One clipped SGD step on ``world_size`` ranks, three ways, and one process's."""
    int_in_range("world_size", world_size, 1, 64)
    positive_number("max_norm", max_norm)
    positive_int("batch_size", batch_size)
    an_int("seed", seed)
    results = ddplab.run(clip_ranks, world_size, timeout=timeout,
                         max_norm=float(max_norm), batch_size=batch_size, seed=seed)
    norm, params = one_process(len(results), float(max_norm), batch_size, seed)
    return Clip.from_ranks(
        results,
        world_size=len(results), max_norm=float(max_norm), norm_one_process=norm,
        norm_per_rank=[r["norm"] for r in results],
        norm_local_per_rank=[r["local_norm"] for r in results],
        norm_reduced_again_per_rank=[r["norm_again"] for r in results],
        params_one_process=params, params=np.stack([r["params"] for r in results]),
        params_local=np.stack([r["params_local"] for r in results]),
        params_reduced_again=np.stack([r["params_again"] for r in results]))


@dataclasses.dataclass
class Accumulation(Result):
    """Clipping with gradient accumulation, against one process on the whole batch."""

    world_size: int
    micro_batches: int
    max_norm: float
    max_diff_clip_every_micro_batch: float
    max_diff_clip_at_last: float

    def describe(self) -> str:
        return (f"{self.micro_batches} micro-batches, max_norm {self.max_norm:g}; step off one "
                f"process's\n  clipping after every micro-batch: "
                f"{self.max_diff_clip_every_micro_batch:.1e}\n"
                f"  clipping after the last only:     {self.max_diff_clip_at_last:.1e}")


def accumulate(world_size: int = 2, max_norm: float = 0.5, batch_size: int = 4,
               micro_batches: int = 2, seed: int = 0, timeout: float = 60.0) -> Accumulation:
    """One clipped step with accumulation on ``world_size`` ranks, clipped two ways."""
    int_in_range("world_size", world_size, 1, 64)
    positive_number("max_norm", max_norm)
    int_in_range("micro_batches", micro_batches, 1, 64)
    if batch_size % micro_batches:
        raise ValueError(f"batch_size ({batch_size}) must be a multiple of micro_batches "
                         f"({micro_batches})")
    results = ddplab.run(accumulation_ranks, world_size, timeout=timeout,
                         max_norm=float(max_norm), batch_size=batch_size,
                         micro_batches=micro_batches, seed=seed)
    _, reference = one_process(world_size, float(max_norm), batch_size, seed)
    return Accumulation.from_ranks(
        results,
        world_size=world_size, micro_batches=micro_batches, max_norm=float(max_norm),
        max_diff_clip_every_micro_batch=float(max(np.abs(r["every"] - reference).max()
                                                  for r in results)),
        max_diff_clip_at_last=float(max(np.abs(r["last"] - reference).max()
                                        for r in results)))


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--max-norm", type=float, default=0.5, help="clip_grad_norm_'s max_norm")
    parser.add_argument("--batch-size", type=int, default=4, help="samples per rank")
    parser.add_argument("--seed", type=int, default=0)
