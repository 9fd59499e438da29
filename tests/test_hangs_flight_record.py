"""The flight recorder on gloo (``hangs.flight_record``): rank 1 slow past the timeout at one
step, rank 2 (of three) stuck there for good. With the page's listing
(``hangs.flight_record_on_error``) every rank dumps when rank 0 times out, and the dumps name
the ranks behind and the all-reduce the others waited in, numbered as the steps worked out
here say (one all-reduce per step, numbered from 1). With a dump in each rank's own
``except``, rank 1's last number is rank 0's, only its entry's creation time tells it came
late, and rank 2 leaves no dump. The buffer is on by default; 0 turns it off."""

import os
import pickle
import subprocess
import sys

import pytest

from ddplab.chapters.hangs import flight_record


@pytest.mark.parametrize("stuck_at, world_size", [(1, 3), (3, 2)])
def test_every_rank_dumps_and_the_dumps_name_the_ranks_behind(stuck_at, world_size):
    record = flight_record.run(steps=5, stuck_at=stuck_at, timeout=3.0, world_size=world_size)
    assert record.raised.startswith("Timed out waiting")
    # rank 0 enqueued steps 0..stuck_at (the last one timed out), the others 0..stuck_at - 1
    assert record.last_enqueued == [stuck_at + 1] + [stuck_at] * (world_size - 1)
    assert record.without_dump == [] and record.behind == list(range(1, world_size))
    assert [e.seq for e in record.entries[0]] == list(range(1, stuck_at + 2))
    assert {e.op for e in record.entries[0]} == {"gloo:all_reduce"}
    assert record.entries[0][-1].sizes == [[1000]]
    assert record.waited_in.seq == stuck_at + 1


def test_a_dump_in_each_except_hides_the_late_rank_and_loses_the_stuck_one():
    record = flight_record.run(steps=5, stuck_at=2, timeout=3.0, recipe="in_except",
                               world_size=3)
    assert record.last_enqueued == [3, 3, None] and record.behind == []
    assert record.without_dump == [2]
    late = record.created_after(3)
    assert late[0] == 0 and late[1] > 3.0  # rank 1 started it after its 6 s of its own work
    assert record.torchfrtrace == ""  # not run: a dump is missing


_ONE_RANK = """
import datetime, pickle, sys
import torch, torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
dist.all_reduce(torch.ones(2))
sys.stdout.buffer.write(_dump_fr_trace())
"""


@pytest.mark.parametrize("size, entries", [(None, 1), ("0", 0)])
def test_the_recorder_is_on_unless_its_size_is_zero(size, entries):
    env = {k: v for k, v in os.environ.items() if k not in flight_record.BUFFER_SIZE}
    if size is not None:
        env["TORCH_FR_BUFFER_SIZE"] = size
    done = subprocess.run([sys.executable, "-c", _ONE_RANK], capture_output=True, env=env,
                          timeout=120, check=True)
    assert len(pickle.loads(done.stdout).get("entries", [])) == entries


def test_bad_input_is_a_value_error():
    with pytest.raises(ValueError, match="stuck_at"):
        flight_record.run(steps=3, stuck_at=3)
    with pytest.raises(ValueError, match="recipe"):
        flight_record.run(recipe="watchdog")
