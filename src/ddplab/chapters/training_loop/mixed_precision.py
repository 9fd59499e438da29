"""Mixed precision under DDP: autocast per rank, and ``GradScaler``'s skipped step, which
every rank takes together.

The step is fp16's, the precision that needs a scaler (bf16 keeps float32's exponent range
and needs none). Autocast and the scaler take the device type of the rank's tensors:
``torch.autocast("cuda", dtype=torch.float16)`` and ``torch.amp.GradScaler("cuda")`` on a GPU
rank, ``"cpu"`` on a CPU rank: in torch 2.13 CPU autocast takes float16 as well as bfloat16
(``autocast.__init__``, ``torch/amp/autocast_mode.py``) and ``GradScaler("cpu")`` exists
(``torch/amp/grad_scaler.py``), so the lines a GPU script copies are the ones run here.
``GradScaler.step``
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
    with torch.autocast(X.device.type, dtype=torch.float16):  # "cuda" on a GPU rank
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
        X[0, 0] = 1e5  # float16's largest is 65504: autocast's cast to float16 overflows
    out = {}
    for name in ("ddp", "local"):
        model = make_model(LAYERS, seed).to(ctx.device)
        before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
        scaler = torch.amp.GradScaler(ctx.device.type, init_scale=2.0 ** 16)
        wrapped = DDP(model) if name == "ddp" else model
        computed_in = []  # the dtype the first layer's output had: what autocast ran
        model[0].register_forward_hook(
            lambda m, i, o, seen=computed_in: seen.append(str(o.dtype)))
        scaled_step(wrapped, torch.optim.SGD(model.parameters(), lr=0.1), scaler, X, y)
        after = torch.cat([p.detach().flatten() for p in model.parameters()])
        out[name] = {"skipped": bool(torch.equal(before, after)),
                     "scale": float(scaler.get_scale()), "params": after.cpu().numpy(),
                     "computed_in": computed_in[0].removeprefix("torch.")}
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
    computed_in: str  # the dtype autocast computed the first layer in, e.g. "float16"

    def describe(self) -> str:
        return "\n".join([
            f"{self.computed_in} autocast and GradScaler on {self.device}, world size "
            f"{self.world_size}: " + (f"rank {self.overflow_rank}'s batch overflows"
                                      if self.overflow_rank >= 0 else "no batch overflows"),
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
        replicas_equal=equal("ddp"), replicas_equal_without_ddp=equal("local"),
        computed_in=results[0]["ddp"]["computed_in"])
