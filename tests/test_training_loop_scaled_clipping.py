"""Clipping under fp16 with a GradScaler: unscale_ first gives exactly the step without a
scaler; a clip of the scaled gradients sees the norm times the scale and all but cancels an
SGD step, while Adam's keeps most of its size."""

import pytest
import torch
import torch.nn.functional as F

from ddplab.chapters.training_loop import scaled_clipping
from ddplab.common.mlp import make_batch, make_model


def test_unscale_then_clip_is_the_step_without_a_scaler_and_the_mistake_is_not():
    result = scaled_clipping.run(world_size=2, max_norm=0.5)
    seen = result.norm_seen
    assert result.scale == 2.0 ** 16  # GradScaler's default init_scale
    assert seen["unscale-then-clip"] == pytest.approx(seen["reference"], rel=1e-6)
    assert seen["clip-scaled"] == pytest.approx(seen["reference"] * result.scale, rel=1e-4)
    assert result.max_param_diff_vs_reference["unscale-then-clip"] == 0.0
    # the reference's step, worked out in one process without DDP: clipped to 0.5, lr 0.1
    model = make_model(scaled_clipping.LAYERS, 0)
    X, y = make_batch(scaled_clipping.LAYERS, scaled_clipping.BATCH, 2, 0, 0)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(X).float(), y)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5).item()
    assert seen["reference"] == pytest.approx(norm, rel=1e-2)  # fp16 forward, other batch split
    step = max(float(p.grad.abs().max()) for p in model.parameters()) * scaled_clipping.LR
    # the mistake's step is the reference's divided by the scale: it misses nearly all of it
    assert result.max_param_diff_vs_reference["clip-scaled"] == pytest.approx(step, rel=0.05)
    # SGD's step is the gradient times lr: clipped to 0.5 it is lr x 0.5 long; the mistake's,
    # clipped to 0.5 in scaled units then unscaled, is that divided by the scale
    assert result.step_size["reference"] == pytest.approx(scaled_clipping.LR * 0.5, rel=1e-5)
    assert result.step_size["clip-scaled"] == pytest.approx(
        result.step_size["reference"] / result.scale, rel=0.02)


def test_under_adam_the_mistake_keeps_most_of_the_steps_size_and_still_changes_it():
    """Adam's first step is lr x g / (|g| + eps) per entry: a gradient divided by ~1e5 gives
    nearly the same step, shortened only where the divided entries come near eps (1e-8)."""
    result = scaled_clipping.run(world_size=2, max_norm=0.5, optimizer="adam")
    assert result.max_param_diff_vs_reference["unscale-then-clip"] == 0.0
    ratio = result.step_size["clip-scaled"] / result.step_size["reference"]
    assert 0.5 < ratio < 1
    assert result.max_param_diff_vs_reference["clip-scaled"] > 1e-3


def test_bad_max_norm_is_a_value_error():
    with pytest.raises(ValueError):
        scaled_clipping.run(max_norm=0)
    with pytest.raises(ValueError, match="optimizer"):
        scaled_clipping.run(optimizer="lamb")
