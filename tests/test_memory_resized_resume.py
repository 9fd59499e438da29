"""A sharded checkpoint saved by FSDP on 2 ranks, loaded on 3 (``memory.resized_resume``):
the model and Adam's state, gathered whole, are what was saved, entry for entry."""

import pytest

from ddplab.chapters.memory import resized_resume
from ddplab.chapters.memory.sharded_checkpoint import LR


def test_saved_on_two_ranks_loads_on_three_exactly():
    r = resized_resume.run(saved_world_size=2, loaded_world_size=3, steps=2)
    assert r.max_model_diff_per_rank == [0.0] * 3
    assert r.max_optimizer_diff_per_rank == [0.0] * 3
    assert r.fresh_diff > 1e-3  # the loading model was not the saved one before its load
    # Adam: exp_avg and exp_avg_sq per parameter entry, and a step count per parameter
    assert r.optimizer_entries > 2 * r.parameters
    assert r.lr_loaded_per_rank == [r.lr_saved] * 3
    assert r.lr_saved == pytest.approx(LR * resized_resume.DECAY)


def test_a_world_size_that_does_not_divide_the_batch_is_refused():
    with pytest.raises(ValueError, match="divide"):
        resized_resume.run(loaded_world_size=5)
