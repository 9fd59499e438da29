"""Clipping under fp16 mixed precision: ``scaler.unscale_(optimizer)`` before the clip.

``GradScaler.scale(loss).backward()`` leaves every gradient multiplied by the scale (65536 at
the start, ``init_scale=2.0**16`` in ``torch/amp/grad_scaler.py``). A clip placed where
``clipping.clipped_step`` puts it then measures the scaled norm, and clips a gradient that is
already far under ``max_norm`` down by the scale: under SGD, whose step is the gradient
times the learning rate, the step all but vanishes. Adam divides by the gradient's own running
size, so there the step keeps about its size, but it is taken on every gradient scaled to one
norm (``max_norm / scale``), clipped or not: a wrong step that looks normal. ``unscale_``
divides the gradients by the scale in place first ("using unscale_ to enable clipping of
unscaled gradients", its docstring), and ``scaler.step`` then knows not to divide again.
bf16 needs no scaler at all: its exponent range is float32's, so gradients do not underflow
(``torch.autocast(..., dtype=torch.bfloat16)`` alone).

Every rank runs one DDP step of each, from the same model and batch: ``unscale-then-clip``
(the function to copy), ``clip-scaled`` (the mistake), and the reference, the same step without
a scaler (plain backward, clip, step), which ``unscale-then-clip`` must match. The forward runs
under fp16 autocast on the rank's device (``float16`` autocast exists on CPU in torch 2.13),
and the optimizer (``optimizer``) is SGD or Adam.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.checks import int_in_range, one_of, positive_number
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.results import Result

LAYERS = (8, 16, 1)
BATCH = 4
LR = 0.1
WAYS = ("reference", "unscale-then-clip", "clip-scaled")
OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}


def fp16_loss(ddp, X, y):
    """The loss under fp16 autocast, as ``scaled_clipped_step`` computes it."""
    with torch.autocast(X.device.type, dtype=torch.float16):
        return F.mse_loss(ddp(X).float(), y)


def scaled_clipped_step(ddp, optimizer, scaler, X, y, max_norm: float) -> float:
    """The step to copy under fp16: scaled backward, unscale, clip, the scaler's step."""
    optimizer.zero_grad()
    with torch.autocast(X.device.type, dtype=torch.float16):  # "cuda" on a GPU rank
        loss = F.mse_loss(ddp(X).float(), y)  # your loss here
    scaler.scale(loss).backward()  # DDP all-reduces the scaled gradients
    scaler.unscale_(optimizer)  # divide them by the scale, in place, before measuring them
    norm = torch.nn.utils.clip_grad_norm_(ddp.parameters(), max_norm)
    scaler.step(optimizer)  # skips the step if a gradient is inf or NaN; does not unscale again
    scaler.update()
    return norm.item()


# ---------------------------------------------------------------- on every rank


def one_step(ctx, way: str, max_norm: float, seed: int,
             optimizer_name: str) -> tuple[float, torch.Tensor]:
    """The norm the clip saw, and the parameters after one step taken ``way``."""
    model = make_model(LAYERS, seed).to(ctx.device)
    ddp = DDP(model)
    optimizer = OPTIMIZERS[optimizer_name](model.parameters(), lr=LR)
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


def steps(ctx, max_norm: float, seed: int, optimizer_name: str) -> dict:
    taken = {way: one_step(ctx, way, max_norm, seed, optimizer_name) for way in WAYS}
    reference = taken["reference"][1]
    start = torch.cat([p.detach().flatten() for p in make_model(LAYERS, seed).parameters()])
    return {"norm": {way: norm for way, (norm, _) in taken.items()},
            "diff": {way: float((params - reference).abs().max().cpu())
                     for way, (_, params) in taken.items()},
            "step": {way: float((params.cpu() - start).norm()) for way, (_, params) in
                     taken.items()},
            "scale": torch.amp.GradScaler(ctx.device.type).get_scale()}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class ScaledClipping(Result):
    world_size: int
    max_norm: float
    optimizer: str  # "sgd" or "adam"
    scale: float  # the scaler's starting scale
    norm_seen: dict  # way -> the norm clip_grad_norm_ measured, rank 0
    max_param_diff_vs_reference: dict  # way -> largest |parameter - reference's|, any rank
    step_size: dict  # way -> the norm of the step the parameters took, rank 0

    def describe(self) -> str:
        lines = [f"one fp16 {self.optimizer} step on {self.world_size} ranks, max_norm "
                 f"{self.max_norm:g}, starting scale {self.scale:g}:",
                 f"{'':20}{'clip saw norm':>13}{'step':>9}  |parameters - reference|"]
        for way in WAYS:
            lines.append(f"  {way:<18}{self.norm_seen[way]:13.4f}{self.step_size[way]:9.1e}  "
                         f"{self.max_param_diff_vs_reference[way]:.1e}"
                         + ("  (no scaler)" if way == "reference" else ""))
        return "\n".join(lines)


def run(world_size: int = 2, max_norm: float = 0.5, seed: int = 0,
        optimizer: str = "sgd") -> ScaledClipping:
    world_size = int_in_range("world_size", world_size, 1, 64)
    max_norm = positive_number("max_norm", max_norm)
    one_of("optimizer", optimizer, tuple(OPTIMIZERS))
    per_rank = ddplab.run(steps, world_size, max_norm=max_norm, seed=seed,
                          optimizer_name=optimizer)
    return ScaledClipping.from_ranks(per_rank, world_size, max_norm, optimizer,
                                     per_rank[0]["scale"], per_rank[0]["norm"],
                                     {way: max(r["diff"][way] for r in per_rank) for way in WAYS},
                                     per_rank[0]["step"])
