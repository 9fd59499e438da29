"""Clipping under fp16 with a GradScaler: unscale_ first gives exactly the step without a
scaler; a clip of the scaled gradients sees the norm times the scale and all but cancels the
step."""

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


def test_bad_max_norm_is_a_value_error():
    with pytest.raises(ValueError):
        scaled_clipping.run(max_norm=0)
