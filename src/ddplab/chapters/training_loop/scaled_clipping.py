"""Clipping under fp16 mixed precision: ``scaler.unscale_(optimizer)`` before the clip.

``GradScaler.scale(loss).backward()`` leaves every gradient multiplied by the scale (65536 at
the start, ``init_scale=2.0**16`` in ``torch/amp/grad_scaler.py``). A clip placed where
``clipping.clipped_step`` puts it then measures the scaled norm, and clips a gradient that is
already far under ``max_norm`` down by the scale: the step all but vanishes. ``unscale_``
divides the gradients by the scale in place first ("using unscale_ to enable clipping of
unscaled gradients", its docstring), and ``scaler.step`` then knows not to divide again.
bf16 needs no scaler at all: its exponent range is float32's, so gradients do not underflow
(``torch.autocast(..., dtype=torch.bfloat16)`` alone).

Every rank runs one DDP step of each, from the same model and batch: ``unscale-then-clip``
(the function to copy), ``clip-scaled`` (the mistake), and the reference, the same step without
a scaler (plain backward, clip, step), which ``unscale-then-clip`` must match. The forward runs
under fp16 autocast on the rank's device (``float16`` autocast exists on CPU in torch 2.13).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.checks import int_in_range, positive_number
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.results import Result

LAYERS = (8, 16, 1)
BATCH = 4
LR = 0.1
WAYS = ("reference", "unscale-then-clip", "clip-scaled")


def fp16_loss(ddp, X, y):
    with torch.autocast(X.device.type, dtype=torch.float16):
        return F.mse_loss(ddp(X).float(), y)


def scaled_clipped_step(ddp, optimizer, scaler, X, y, max_norm: float) -> float:
    """The step to copy under fp16: scaled backward, unscale, clip, the scaler's step."""
    optimizer.zero_grad()
    scaler.scale(fp16_loss(ddp, X, y)).backward()  # DDP all-reduces the scaled gradients
    scaler.unscale_(optimizer)  # divide them by the scale, in place, before measuring them
    norm = torch.nn.utils.clip_grad_norm_(ddp.parameters(), max_norm)
    scaler.step(optimizer)  # skips the step if a gradient is inf or NaN; does not unscale again
    scaler.update()
    return norm.item()


# ---------------------------------------------------------------- on every rank


def one_step(ctx, way: str, max_norm: float, seed: int) -> tuple[float, torch.Tensor]:
    """The norm the clip saw, and the parameters after one step taken ``way``."""
    model = make_model(LAYERS, seed).to(ctx.device)
    ddp = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    X, y = make_batch(LAYERS, BATCH, ctx.world_size, seed, 0)
    rows = slice(ctx.rank * BATCH, (ctx.rank + 1) * BATCH)
    X, y = X[rows].to(ctx.device), y[rows].to(ctx.device)
    scaler = torch.amp.GradScaler(ctx.device.type)
    if way == "unscale-then-clip":
        norm = scaled_clipped_step(ddp, optimizer, scaler, X, y, max_norm)
    elif way == "clip-scaled":  # the mistake: clipped_step's clip, in a scaled step
        optimizer.zero_grad()
        scaler.scale(fp16_loss(ddp, X, y)).backward()
        norm = torch.nn.utils.clip_grad_norm_(ddp.parameters(), max_norm).item()
        scaler.step(optimizer)
        scaler.update()
    else:  # no scaler: the gradients are the true ones
        optimizer.zero_grad()
        fp16_loss(ddp, X, y).backward()
        norm = torch.nn.utils.clip_grad_norm_(ddp.parameters(), max_norm).item()
        optimizer.step()
    return norm, torch.cat([p.detach().flatten() for p in model.parameters()])


def steps(ctx, max_norm: float, seed: int) -> dict:
    taken = {way: one_step(ctx, way, max_norm, seed) for way in WAYS}
    reference = taken["reference"][1]
    return {"norm": {way: norm for way, (norm, _) in taken.items()},
            "diff": {way: float((params - reference).abs().max().cpu())
                     for way, (_, params) in taken.items()},
            "scale": torch.amp.GradScaler(ctx.device.type).get_scale()}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class ScaledClipping(Result):
    world_size: int
    max_norm: float
    scale: float  # the scaler's starting scale
    norm_seen: dict  # way -> the norm clip_grad_norm_ measured, rank 0
    max_param_diff_vs_reference: dict  # way -> largest |parameter - reference's|, any rank

    def describe(self) -> str:
        lines = [f"one fp16 step on {self.world_size} ranks, max_norm {self.max_norm:g}, "
                 f"starting scale {self.scale:g}:"]
        for way in WAYS[1:]:
            lines.append(f"  {way:<18} clip saw norm {self.norm_seen[way]:12.4f}; "
                         f"|parameters - reference| {self.max_param_diff_vs_reference[way]:.1e}")
        lines.append(f"  (no scaler: norm {self.norm_seen['reference']:.4f})")
        return "\n".join(lines)


def run(world_size: int = 2, max_norm: float = 0.5, seed: int = 0) -> ScaledClipping:
    world_size = int_in_range("world_size", world_size, 1, 64)
    max_norm = positive_number("max_norm", max_norm)
    per_rank = ddplab.run(steps, world_size, max_norm=max_norm, seed=seed)
    return ScaledClipping.from_ranks(per_rank, world_size, max_norm, per_rank[0]["scale"],
                                     per_rank[0]["norm"],
                                     {way: max(r["diff"][way] for r in per_rank) for way in WAYS})
