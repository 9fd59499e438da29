"""Mixed precision under DDP: autocast per rank, and ``GradScaler``'s skipped step, which
every rank takes together.

Autocast and the scaler take the device type of the rank's tensors: ``torch.autocast("cuda",
dtype=torch.bfloat16)`` and ``torch.amp.GradScaler("cuda")`` on a GPU rank, ``"cpu"`` on a CPU
rank (the CPU scaler exists in torch 2.13, ``torch/amp/grad_scaler.py``). ``GradScaler.step``
skips the optimizer step when the unscaled gradients hold an inf or NaN (``_unscale_grads_`` ->
``torch._amp_foreach_non_finite_check_and_unscale_``) and ``update`` halves the scale. The
check reads this rank's gradients only; under DDP they are the all-reduced average, so an
overflow on one rank is an inf on every rank, and every rank skips the same step. Without
the all-reduce (each rank on its own gradient, as before DDP's hooks ran) only the
overflowing rank would skip, and the replicas would part.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.checks import int_in_range
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.results import Result

LAYERS = (8, 16, 1)
BATCH = 4


def scaled_step(model, optimizer, scaler, X, y) -> None:
    """The step to copy: forward under autocast, scaled backward, scaler's step and update."""
    with torch.autocast(X.device.type, dtype=torch.bfloat16):  # "cuda" on a GPU rank
        loss = F.mse_loss(model(X).float(), y)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)  # skipped if any gradient is inf or NaN
    scaler.update()  # then the scale is halved


# ---------------------------------------------------------------- on every rank


def overflow_step(ctx, overflow_rank: int, seed: int) -> dict:
    """One scaled step with and without DDP; ``overflow_rank``'s batch overflows (-1: none)."""
    X, y = make_batch(LAYERS, BATCH, ctx.world_size, seed, 0)
    rows = slice(ctx.rank * BATCH, (ctx.rank + 1) * BATCH)
    X, y = X[rows].to(ctx.device), y[rows].to(ctx.device)
    if ctx.rank == overflow_rank:
        X[0, 0] = 3e38  # float32's largest is 3.4e38: the scaled loss overflows
    out = {}
    for name in ("ddp", "local"):
        model = make_model(LAYERS, seed).to(ctx.device)
        before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
        scaler = torch.amp.GradScaler(ctx.device.type, init_scale=2.0 ** 16)
        wrapped = DDP(model) if name == "ddp" else model
        scaled_step(wrapped, torch.optim.SGD(model.parameters(), lr=0.1), scaler, X, y)
        after = torch.cat([p.detach().flatten() for p in model.parameters()])
        out[name] = {"skipped": bool(torch.equal(before, after)),
                     "scale": float(scaler.get_scale()), "params": after.cpu().numpy()}
    return out


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class MixedPrecision(Result):
    world_size: int
    overflow_rank: int
    skipped_per_rank: list[bool]  # under DDP
    scale_per_rank: list[float]
    skipped_without_ddp_per_rank: list[bool]  # each rank on its own gradient
    replicas_equal: bool  # under DDP, after the step
    replicas_equal_without_ddp: bool

    def describe(self) -> str:
        return "\n".join([
            f"rank {self.overflow_rank}'s batch overflows, world size {self.world_size}",
            f"DDP:     step skipped per rank {self.skipped_per_rank}, scale after "
            f"{self.scale_per_rank}",
            f"         replicas equal after the step: {self.replicas_equal}",
            f"no DDP:  step skipped per rank {self.skipped_without_ddp_per_rank}, "
            f"replicas equal: {self.replicas_equal_without_ddp}"])


def run(world_size: int = 2, overflow_rank: int = 1, seed: int = 0,
        timeout: float = 60.0) -> MixedPrecision:
    int_in_range("world_size", world_size, 1, 64)
    int_in_range("overflow_rank", overflow_rank, -1, world_size - 1)
    results = ddplab.run(overflow_step, world_size, timeout=timeout,
                         overflow_rank=overflow_rank, seed=seed)

    def equal(name):
        return bool(all(np.array_equal(r[name]["params"], results[0][name]["params"])
                        for r in results))

    return MixedPrecision.from_ranks(
        results,
        world_size=world_size, overflow_rank=overflow_rank,
        skipped_per_rank=[r["ddp"]["skipped"] for r in results],
        scale_per_rank=[r["ddp"]["scale"] for r in results],
        skipped_without_ddp_per_rank=[r["local"]["skipped"] for r in results],
        replicas_equal=equal("ddp"), replicas_equal_without_ddp=equal("local"))
