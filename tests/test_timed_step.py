"""The one timed step (``ddplab.common.timed_step``): what a run's step is, worked out by hand,
and a clock that waits for a GPU."""

import pytest
import torch

import ddplab
import rank_fns
from ddplab.common import timed_step


def test_the_runs_step_is_the_slowest_ranks_at_the_median_iteration():
    # per iteration the slowest rank: 3 (rank 0), 4 (rank 1), 5 (rank 0); the middle one is 4
    ranks = [[{"step": 3.0, "forward": 1.0}, {"step": 1.0, "forward": 0.5},
              {"step": 5.0, "forward": 2.0}],
             [{"step": 2.0, "forward": 1.5}, {"step": 4.0, "forward": 3.0},
              {"step": 1.0, "forward": 0.2}]]
    assert timed_step.slowest_steps(ranks) == [3.0, 4.0, 5.0]
    assert timed_step.median_iteration(ranks) == 1
    assert timed_step.median_step(ranks) == {"step": 4.0, "forward": 3.0}
    # an even count takes the upper middle, a step that happened, never an average of two
    assert timed_step.middle([4.0, 1.0, 3.0, 2.0]) == 3.0


def test_the_phases_of_a_step_add_up_to_it():
    stamps = {"start": 10.0, "forward_end": 11.0, "backward_end": 15.0, "step_end": 16.5,
              "ready": [("b", 12.0), ("a", 14.0)]}
    phases = timed_step.phases(stamps, blocked_s=0.5)
    # forward 1; computing to the last gradient 3, less 0.5 blocked; waiting 1 + 0.5; optimizer
    assert phases == {"forward": 1.0, "backward": 2.5, "waiting": 1.5, "optimizer": 1.5,
                      "step": 6.5}
    assert sum(phases[p] for p in timed_step.PHASES) == phases["step"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_step_on_a_gpu_is_timed_to_the_end_of_its_kernels():
    torch.cuda.init()
    cycles = 10 ** 9  # about half a second at 1.5-2 GHz
    rate = getattr(torch.cuda.get_device_properties(0), "clock_rate", 0)  # kHz
    expected = cycles / (rate * 1e3) if rate else 0.2
    # a CUDA placement by name: "auto" on one GPU is gloo on CPU ranks, which hide the GPU
    with ddplab.placed(backend="nccl"):
        ranks = ddplab.run(rank_fns.sleep_on_the_gpu, 1, cycles=cycles)
    assert ranks.device == "cuda"
    seconds = ranks[0]
    assert seconds > 0.5 * expected  # a host clock around the launch alone reads microseconds
