"""Does DDP average or sum gradients, and over GPUs or over nodes?

    python -m ddplab averaging --world-size 4 --batch-size 8 --reduction mean --seed 0 --json
    torchrun --nproc-per-node 4 -m ddplab averaging --batch-size 8 --json

Every rank builds the same small model and takes its own slice of one synthetic dataset. Each
rank computes the gradient of the same loss three ways: locally (no communication), with naive
data parallel (all-reduce SUM of every gradient, then divide by the world size, written out in
``naive_average``) and with DistributedDataParallel. The driver adds a reference: one process,
no DDP, the same loss on all the ranks' slices concatenated.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.checks import a_bool, one_of, positive_int
from ddplab.common.mlp import flat_grad, make_model
from ddplab.common.results import Result

COMMAND = "averaging"  # python -m ddplab averaging

REDUCTIONS = ("mean", "sum")
# How each rank may rescale its loss so that DDP's average comes out as the one-process loss:
# "world_size": multiply by the world size (a summed loss then gives the global sum);
# "global_count": sum the rank's per-sample losses, times world size, over the all-reduced
# number of samples of all ranks (the global mean, whatever each rank holds).
CORRECTIONS = (None, "world_size", "global_count")
# The model: mlp.make_model(LAYERS, seed, activation=torch.nn.Tanh), a tiny MLP with few
# enough parameters (21) to draw every gradient element.
LAYERS = (3, 4, 1)


# ---------------------------------------------------------------- model, data, loss


def make_data(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` samples of a noisy smooth function of 3 features; the same for every rank."""
    g = torch.Generator().manual_seed(10_000 + seed)
    X = torch.randn(n, 3, generator=g)
    y = torch.sin(X @ torch.tensor([[1.0], [-2.0], [0.5]])) + 0.1 * torch.randn(n, 1, generator=g)
    return X, y


def naive_average(model: torch.nn.Module, world_size: int) -> None:
    """Naive data parallel: sum each gradient over all ranks, then divide
    by the world size.

    One all-reduce per parameter, after backward has finished. DDP
    computes the same average, in buckets overlapped with backward
    (chapter "Buckets").
    """
    for param in model.parameters():
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
        param.grad /= world_size


def rank_loss(model, X, y, reduction, correction, world_size):
    """The loss this rank back-propagates (see CORRECTIONS)."""
    if correction == "global_count":
        count = torch.tensor([float(len(X))], device=X.device)
        dist.all_reduce(count)  # samples (or tokens) on all ranks
        loss = F.mse_loss(model(X), y, reduction="sum")
        return loss * world_size / count
    loss = F.mse_loss(model(X), y, reduction=reduction)
    if correction == "world_size":
        return loss * world_size
    return loss


# ---------------------------------------------------------------- on every rank


def gradients(ctx, batch_sizes: list[int], reduction: str, correction: str | None,
              seed: int, naive: bool = True) -> dict:
    """This rank's local, naive-averaged (if ``naive``) and DDP gradient."""
    start = sum(batch_sizes[: ctx.rank])
    X_all, y_all = make_data(seed, sum(batch_sizes))
    X = X_all[start:start + batch_sizes[ctx.rank]].to(ctx.device)
    y = y_all[start:start + batch_sizes[ctx.rank]].to(ctx.device)
    world_size = ctx.world_size

    local = make_model(LAYERS, seed, activation=torch.nn.Tanh).to(ctx.device)
    rank_loss(local, X, y, reduction, correction, world_size).backward()

    naive_grad = None
    if naive:
        naive_model = make_model(LAYERS, seed, activation=torch.nn.Tanh).to(ctx.device)
        rank_loss(naive_model, X, y, reduction, correction, world_size).backward()
        naive_average(naive_model, world_size)
        naive_grad = flat_grad(naive_model)

    model = make_model(LAYERS, seed, activation=torch.nn.Tanh).to(ctx.device)
    ddp = DDP(model)
    rank_loss(ddp, X, y, reduction, correction, world_size).backward()
    return {"local": flat_grad(local), "naive": naive_grad, "ddp": flat_grad(model),
            "samples": len(X)}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class Averaging(Result):
    """Gradients of one data-parallel step, per rank, and the one-process reference."""

    world_size: int
    batch_sizes: list[int]  # samples per rank
    reduction: str
    correction: str | None
    seed: int
    param_names: list[str]
    param_shapes: list[tuple[int, ...]]
    local_grads: np.ndarray  # (world_size, n): before synchronisation
    naive_grads: np.ndarray | None  # (world_size, n): after naive_average; None if not run
    ddp_grads: np.ndarray  # (world_size, n): after DDP's backward
    reference_grad: np.ndarray  # (n,): one process, all ranks' samples concatenated
    json_extras = ("batch_size", "global_batch_size")

    @property
    def batch_size(self) -> int | None:
        """Samples per rank, when every rank has the same number."""
        return self.batch_sizes[0] if len(set(self.batch_sizes)) == 1 else None

    @property
    def global_batch_size(self) -> int:
        return sum(self.batch_sizes)

    @property
    def max_diff(self) -> float:
        """Largest |DDP's gradient - the reference| over ranks and elements."""
        return float(np.abs(self.ddp_grads - self.reference_grad).max())

    @property
    def ratio_to_reference(self) -> float:
        """DDP's gradient over the reference (least squares), as in accumulation's result."""
        ref = self.reference_grad
        return float(self.ddp_grads[0] @ ref / (ref @ ref))

    @property
    def max_diff_naive(self) -> float:
        """Largest |naive data parallel's gradient - DDP's|, as in the buckets chapter."""
        if self.naive_grads is None:
            raise ValueError("this run left out naive data parallel (naive=False)")
        return float(np.abs(self.naive_grads - self.ddp_grads).max())

    def json_fields(self) -> dict:
        return {**super().json_fields(),
                "max_abs_diff_ddp_vs_reference": self.max_diff}

    def describe(self) -> str:
        names = ", ".join(f"{n}{list(s)}" for n, s in zip(self.param_names, self.param_shapes))
        naive = ([] if self.naive_grads is None else
                 [f"largest |DDP - naive all-reduce/world size|: {self.max_diff_naive:.2e}"])
        return "\n".join([
            f"world size {self.world_size}, {self.batch_sizes[0]} samples per rank, "
            f"loss reduction {self.reduction!r}", f"parameters: {names}", *naive,
            f"largest |DDP - one process on the concatenated batch|: {self.max_diff:.2e}",
            f"DDP's gradient is {self.ratio_to_reference:.4f} times one process's"])


def reference_gradient(batch_sizes, reduction: str, seed: int) -> np.ndarray:
    """One process, no DDP: the gradient of the loss over every rank's samples at once."""
    model = make_model(LAYERS, seed, activation=torch.nn.Tanh)
    X, y = make_data(seed, sum(batch_sizes))
    F.mse_loss(model(X), y, reduction=reduction).backward()
    return flat_grad(model).numpy()


def run(world_size: int = 4, batch_size: int = 8, reduction: str = "mean", seed: int = 0,
        batch_sizes: list[int] | None = None, correction: str | None = None,
        naive: bool = True, timeout: float = 60.0) -> Averaging:
    """One data-parallel step on ``world_size`` ranks; ``batch_sizes`` overrides equal batches.

    ``naive=False`` leaves out the naive version (one all-reduce per parameter, 4 here), which
    the gradient figure does not draw: a slider panel answers a move sooner without it.
    """
    batch_sizes = _check(world_size, batch_size, reduction, correction, batch_sizes)
    a_bool("naive", naive)
    results = ddplab.run(gradients, world_size, timeout=timeout,
                         batch_sizes=batch_sizes,
                         reduction=reduction, correction=correction, seed=seed, naive=naive)
    model = make_model(LAYERS, seed, activation=torch.nn.Tanh)
    return Averaging.from_ranks(
        results,
        world_size=len(results), batch_sizes=batch_sizes, reduction=reduction,
        correction=correction,
        seed=seed, param_names=[name for name, _ in model.named_parameters()],
        param_shapes=[tuple(p.shape) for p in model.parameters()],
        local_grads=np.stack([r["local"] for r in results]),
        naive_grads=np.stack([r["naive"] for r in results]) if naive else None,
        ddp_grads=np.stack([r["ddp"] for r in results]),
        reference_grad=reference_gradient(batch_sizes, reduction, seed))


def _check(world_size, batch_size, reduction, correction, batch_sizes) -> list[int]:
    positive_int("batch_size", batch_size)
    one_of("reduction", reduction, REDUCTIONS)
    one_of("correction", correction, CORRECTIONS)
    if batch_sizes is None:
        positive_int("world_size", world_size)
        return [batch_size] * world_size
    batch_sizes = list(batch_sizes)
    if len(batch_sizes) != world_size:
        raise ValueError(f"batch_sizes must have one entry per rank ({world_size}), "
                         f"got {batch_sizes}")
    for count in batch_sizes:
        positive_int("each of batch_sizes", count)
    return batch_sizes


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--batch-size", type=int, default=8, help="samples per rank")
    parser.add_argument("--reduction", choices=REDUCTIONS, default="mean")
    parser.add_argument("--seed", type=int, default=0)
