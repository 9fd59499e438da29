"""BatchNorm under DDP: each rank normalises with its own batch's statistics, so W ranks of
``global_batch_size / W`` samples do not compute what one process on the global batch does.

    python -m ddplab batchnorm --world-size 4 --global-batch-size 8 --json
    python -m ddplab batchnorm --world-size 4 --global-batch-size 8 --sync --json

``global_batch_size`` is split evenly over the ranks. Every rank runs one
forward and backward of a small model with a ``BatchNorm1d`` through DDP; the driver runs the
same model in one process on the whole batch. With ``sync=True`` the BatchNorm is replaced by
``SyncBatchNormCPU``: what ``torch.nn.SyncBatchNorm`` computes, written out with collectives
gloo runs on CPU. torch's own refuses CPU input (``SyncBatchNorm.forward`` in
``torch/nn/modules/batchnorm.py``); the rank tries it and reports the error.
"""

from __future__ import annotations

import dataclasses
import textwrap

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.checks import an_int, int_in_range, positive_int
from ddplab.common.mlp import flat_grad, make_model
from ddplab.common.results import Result

COMMAND = "batchnorm"  # python -m ddplab batchnorm

FEATURES, HIDDEN = 4, 6
LAYERS = (FEATURES, HIDDEN, 1)  # Linear, BatchNorm, ReLU, Linear (ddplab.common.mlp)


class SyncBatchNormFunction(torch.autograd.Function):
    """Batch normalisation with statistics over every rank's samples.

    Forward all-reduces each channel's sum, sum of squares and count (sums
    add across ranks; torch all-gathers each rank's mean, inverse std and
    count instead and combines them, ``batch_norm_gather_stats_with_counts``,
    because its fused kernel yields means). Backward all-reduces ``sum_dy``
    and ``sum_dy_xmu`` as torch's does (``SyncBatchNorm.backward`` in
    ``torch/nn/modules/_functions.py``); the weight and bias gradients stay
    local sums, which DDP then averages like any other gradient.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        samples = x.new_full((1,), x.shape[0])  # this rank's
        stats = torch.cat([x.sum(0), (x * x).sum(0), samples])
        dist.all_reduce(stats)
        C = x.shape[1]
        total, total_sq, count = stats[:C], stats[C:2 * C], stats[2 * C]
        mean = total / count
        # biased, as BatchNorm normalises with
        var = total_sq / count - mean * mean
        invstd = torch.rsqrt(var + eps)
        ctx.save_for_backward(x, weight, mean, invstd, count)
        return (x - mean) * invstd * weight + bias, mean, var, count

    @staticmethod
    def backward(ctx, grad_out, _mean, _var, _count):
        x, weight, mean, invstd, count = ctx.saved_tensors
        xmu = x - mean
        sum_dy, sum_dy_xmu = grad_out.sum(0), (grad_out * xmu).sum(0)
        # local: DDP averages them
        grad_weight, grad_bias = sum_dy_xmu * invstd, sum_dy
        combined = torch.cat([sum_dy, sum_dy_xmu])
        dist.all_reduce(combined)
        C = x.shape[1]
        mean_dy, mean_dy_xmu = combined[:C] / count, combined[C:] / count
        centred = grad_out - mean_dy - xmu * invstd * invstd * mean_dy_xmu
        grad_x = centred * invstd * weight
        return grad_x, grad_weight, grad_bias, None


class SyncBatchNormCPU(torch.nn.BatchNorm1d):
    """``nn.BatchNorm1d`` whose training statistics come from every rank (2-D input)."""

    def forward(self, x):
        if not self.training:
            return super().forward(x)
        y, mean, var, count = SyncBatchNormFunction.apply(x, self.weight, self.bias, self.eps)
        with torch.no_grad():  # running variance is unbiased, as in F.batch_norm
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var * count / (count - 1), self.momentum)
            self.num_batches_tracked += 1
        return y


def make_data(global_batch_size: int, seed: int):
    g = torch.Generator().manual_seed(20_000 + seed)
    X = torch.randn(global_batch_size, FEATURES, generator=g)
    return X, X.sum(1, keepdim=True).sin() + 0.1 * torch.randn(global_batch_size, 1, generator=g)


# ---------------------------------------------------------------- on every rank


def step(ctx, global_batch_size: int, seed: int, sync: bool) -> dict:
    """One forward and backward through DDP on this rank's share of the global batch."""
    X_all, y_all = make_data(global_batch_size, seed)
    share = global_batch_size // ctx.world_size
    rows = slice(ctx.rank * share, (ctx.rank + 1) * share)
    X, y = X_all[rows].to(ctx.device), y_all[rows].to(ctx.device)
    norm = SyncBatchNormCPU if sync else torch.nn.BatchNorm1d
    model = make_model(LAYERS, seed, norm=norm).to(ctx.device)
    ddp = DDP(model)  # keep a reference until backward is done
    output = ddp(X)
    F.mse_loss(output, y).backward()
    running_mean = model[1].running_mean.clone()
    ddp.eval()
    with torch.no_grad():  # forward_sync_buffers: rank 0's buffers overwrite the others' here
        ddp(X)
    return {"output": output.detach(), "grad": flat_grad(model), "running_mean": running_mean,
            "running_mean_next": model[1].running_mean.clone(),
            "torch_sync_error": _torch_sync_batchnorm_error(X)}


def _torch_sync_batchnorm_error(X) -> str | None:
    """What ``torch.nn.SyncBatchNorm`` says to this rank's input (None: it ran)."""
    norm = torch.nn.SyncBatchNorm(HIDDEN).to(X.device)
    try:
        norm(torch.zeros(len(X), HIDDEN, device=X.device))
    except ValueError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class BatchNorm(Result):
    """DDP with BatchNorm on W ranks against one process on the global batch."""

    world_size: int
    global_batch_size: int  # split evenly over the ranks
    sync: bool
    outputs: np.ndarray  # (global_batch_size,): every rank's outputs, in rank order
    grads: np.ndarray  # (world_size, n): DDP's gradient on each rank
    running_means: np.ndarray  # (world_size, channels): BatchNorm's running mean after the step
    running_means_next: np.ndarray  # (world_size, channels): after the next forward (eval mode)
    reference_output: np.ndarray  # (global_batch_size,): one process, whole batch
    reference_grad: np.ndarray  # (n,)
    reference_running_mean: np.ndarray
    torch_sync_error: str | None  # torch.nn.SyncBatchNorm on this device, as rank 0 saw it

    json_extras = ("max_diff", "max_grad_diff", "max_output_diff", "max_running_mean_diff")

    @property
    def max_running_mean_diff(self) -> float:
        """Largest |running mean on a rank - one process's| after the step."""
        return float(np.abs(self.running_means - self.reference_running_mean).max())

    @property
    def max_grad_diff(self) -> float:
        return float(np.abs(self.grads - self.reference_grad).max())

    @property
    def max_output_diff(self) -> float:
        return float(np.abs(self.outputs - self.reference_output).max())

    @property
    def max_diff(self) -> float:
        """Largest |DDP - one process| over the gradient (every rank) and the outputs."""
        return max(self.max_grad_diff, self.max_output_diff)

    def describe(self) -> str:
        norm = "SyncBatchNormCPU" if self.sync else "BatchNorm1d"
        share = self.global_batch_size // self.world_size
        return "\n".join(textwrap.fill(line, 78, subsequent_indent="  ") for line in [
            f"{norm}, {self.world_size} ranks x {share} samples against 1 process x "
            f"{self.global_batch_size}",
            f"largest |DDP - one process|: gradient {self.max_grad_diff:.2e}, "
            f"outputs {self.max_output_diff:.2e}, running mean {self.max_running_mean_diff:.2e}",
            f"torch.nn.SyncBatchNorm here: {self.torch_sync_error or 'runs'}"])


def reference(global_batch_size: int, seed: int) -> dict:
    """One process, no DDP, the whole batch."""
    model = make_model(LAYERS, seed, norm=torch.nn.BatchNorm1d)
    X, y = make_data(global_batch_size, seed)
    output = model(X)
    F.mse_loss(output, y).backward()
    return {"output": output.detach().numpy().ravel(), "grad": flat_grad(model).numpy(),
            "running_mean": model[1].running_mean.numpy()}


def run(world_size: int = 4, global_batch_size: int = 8, seed: int = 0, sync: bool = False,
        timeout: float = 60.0) -> BatchNorm:
    """One step of DDP with BatchNorm (or SyncBatchNormCPU), against one process."""
    int_in_range("world_size", world_size, 1, ddplab.MAX_WORLD_SIZE)
    positive_int("global_batch_size", global_batch_size)
    an_int("seed", seed)
    if global_batch_size % world_size or global_batch_size // world_size < 2 and not sync:
        raise ValueError(f"global_batch_size must split into world_size={world_size} equal "
                         f"shares of at least 2 samples (BatchNorm needs 2 to train), got "
                         f"{global_batch_size}")
    results = ddplab.run(step, world_size, timeout=timeout,
                         global_batch_size=global_batch_size, seed=seed, sync=bool(sync))
    ref = reference(global_batch_size, seed)
    return BatchNorm.from_ranks(
        results,
        world_size=world_size, global_batch_size=global_batch_size, sync=bool(sync),
        outputs=np.concatenate([r["output"].ravel() for r in results]),
        grads=np.stack([r["grad"] for r in results]),
        running_means=np.stack([r["running_mean"] for r in results]),
        running_means_next=np.stack([r["running_mean_next"] for r in results]),
        reference_output=ref["output"], reference_grad=ref["grad"],
        reference_running_mean=ref["running_mean"], torch_sync_error=results[0]["torch_sync_error"],
    )


def add_arguments(parser) -> None:
    parser.add_argument("--global-batch-size", type=int, default=8,
                        help="global batch size, split evenly over the ranks (default 8)")
    parser.add_argument("--sync", action="store_true",
                        help="SyncBatchNorm written out for gloo (statistics over all ranks)")
    parser.add_argument("--seed", type=int, default=0)
