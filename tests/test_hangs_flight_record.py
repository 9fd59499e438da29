"""The flight recorder on gloo (``hangs.flight_record``): two ranks, rank 1 stuck past the
timeout at one step; the dumps name it as the rank behind and the all-reduce the other waited
in, numbered as the steps worked out here say (one all-reduce per step, numbered from 1)."""

import pytest

from ddplab.chapters.hangs import flight_record


@pytest.mark.parametrize("stuck_at", [1, 3])
def test_the_dumps_name_the_rank_behind_and_the_collective_waited_in(stuck_at):
    record = flight_record.run(steps=5, stuck_at=stuck_at, timeout=1.5)
    assert record.raised.startswith("Timed out waiting")
    # rank 0 enqueued steps 0..stuck_at (the last one timed out), rank 1 steps 0..stuck_at - 1
    assert record.last_enqueued == [stuck_at + 1, stuck_at]
    assert [e.seq for e in record.entries[0]] == list(range(1, stuck_at + 2))
    assert {e.op for e in record.entries[0]} == {"gloo:all_reduce"}
    assert record.entries[0][-1].sizes == [[1000]]
    assert record.behind == 1 and record.waited_in.seq == stuck_at + 1


def test_bad_input_is_a_value_error():
    with pytest.raises(ValueError, match="stuck_at"):
        flight_record.run(steps=3, stuck_at=3)
