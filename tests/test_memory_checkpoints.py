"""Checkpoints of a sharded run (``memory.sharded_checkpoint``): saved, loaded into a model
built from another seed, one more step: the same parameters as the model that went on."""

import pytest

from ddplab.chapters.memory import sharded_checkpoint


@pytest.mark.parametrize("strategy", sharded_checkpoint.STRATEGIES)
def test_a_loaded_checkpoint_goes_on_as_the_saved_run_does(strategy):
    r = sharded_checkpoint.run(world_size=2, strategy=strategy)
    assert r.max_diff_per_rank == [0.0, 0.0]
    assert r.fresh_diff > 1e-3  # the second model was not the first before loading
    expected = [".metadata", "__0_0.distcp", "__1_0.distcp"] if strategy == "fsdp" \
        else ["checkpoint.pt"]
    assert r.files == expected
    assert r.world_size == 2 and r.backend == "gloo"


def test_bad_input_fails_before_any_rank_starts():
    with pytest.raises(ValueError, match="strategy"):
        sharded_checkpoint.run(strategy="ddp")
    with pytest.raises(ValueError, match="steps"):
        sharded_checkpoint.run(steps=0)
