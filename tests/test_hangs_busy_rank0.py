"""Rank 0 busy alone past the group's timeout (the watchdog's commonest cause, on gloo): the
waiting rank's all-reduce gives up after the timeout, not before, and a timeout longer than
rank 0's work lets every rank finish every step."""

import pytest

from ddplab.chapters.hangs import busy_rank0


def test_a_rank_waiting_on_a_busy_rank_0_times_out_after_the_group_timeout():
    result = busy_rank0.run(world_size=2, busy_seconds=2.0, group_timeout=1.0, steps=2)
    assert result.timed_out
    # both ranks finished step 0 together; rank 1 gave up in step 1's all-reduce
    assert result.steps_finished_per_rank == [1, 1]
    assert "Timed out waiting 1000ms" in result.error_per_rank[1]
    # it waited the group's timeout (1 s), well short of rank 0's 2 s of work
    assert 0.9 < result.seconds_per_rank[1] < 1.9
    assert "Timed out waiting 1000ms" in busy_rank0.short(result.error_per_rank[1])


def test_a_group_timeout_longer_than_rank_0s_work_finishes():
    result = busy_rank0.run(world_size=2, busy_seconds=0.5, group_timeout=30.0, steps=2)
    assert not result.timed_out
    assert result.steps_finished_per_rank == [2, 2]
    # rank 1 waited for rank 0's sleep inside its all-reduce
    assert result.seconds_per_rank[1] >= 0.5


@pytest.mark.parametrize("params", [{"world_size": 1}, {"busy_seconds": 0},
                                    {"group_timeout": -1}, {"steps": 1}])
def test_bad_input_is_a_value_error(params):
    with pytest.raises(ValueError):
        busy_rank0.run(**params)
