"""torch's schedulers (``LinearLR`` then the reader's, through ``SequentialLR``) give the
chapter's gradual warmup: ``lr_scaling.lr_schedule``, computed independently, step by step."""

import math

import pytest

from ddplab.chapters.lr_scaling import lr_scaling, warmup


@pytest.mark.parametrize("world_size, warmup_steps", [(2, 1), (4, 10), (8, 5)])
def test_warmup_then_constant_is_goyal_warmup(world_size, warmup_steps):
    got = warmup.rates(0.1, world_size, warmup_steps, 20)
    expected = lr_scaling.lr_schedule(0.1, "linear", world_size, warmup_steps, 20)
    assert max(abs(a - b) for a, b in zip(got, expected)) < 1e-12
    assert got[0] == pytest.approx(0.1) and got[warmup_steps] == pytest.approx(0.1 * world_size)


def test_cosine_after_warmup_starts_at_the_scaled_rate():
    got = warmup.rates(0.1, 4, 5, 15, after="cosine")
    peak = 0.4
    for t in range(5, 15):  # CosineAnnealingLR's closed form from step 5 on, T_max 10
        assert got[t] == pytest.approx(peak * (1 + math.cos(math.pi * (t - 5) / 10)) / 2)


def test_bad_input():
    with pytest.raises(ValueError, match="warmup_steps"):
        warmup.rates(0.1, 4, 20, 20)
    with pytest.raises(ValueError, match="after"):
        warmup.rates(0.1, 4, 2, 20, after="steps")
