"""Join's cost per forward: the all-reduces DDP's forward starts, counted with a
spy on ProcessGroup.allreduce on real gloo ranks. Worked out from torch 2.13's source:
none without Join; under Join, Join.notify_join_context and
_check_global_requires_backward_grad_sync (DistributedDataParallel._pre_forward); a third,
blocking one in notify_join_context with throw_on_early_termination=True."""

import pytest

from ddplab.chapters.hangs import join_cost


def test_join_starts_two_all_reduces_per_forward_and_three_when_it_may_throw():
    cost = join_cost.run(world_size=3, steps=2)
    assert cost.per_forward == {"no Join": [0, 0], "Join": [2, 2],
                                "Join, throw_on_early_termination": [3, 3]}
    assert "2 all-reduce(s) started in each forward" in cost.describe()


def test_a_count_that_changes_between_forwards_is_not_one_number():
    cost = join_cost.JoinCost(world_size=2, steps=2, per_forward={"Join": [2, 1]})
    with pytest.raises(ValueError, match="not the same in every forward"):
        cost.extra("Join")


@pytest.mark.parametrize("bad", [dict(world_size=1), dict(steps=0)])
def test_bad_input_is_refused_before_any_rank_starts(bad):
    with pytest.raises(ValueError):
        join_cost.run(**bad)
