"""Lab 00 and the running page: a first process group, checked against arithmetic and against
one process on the concatenated batch."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import ddplab
from ddplab.chapters.running import first_group as check
from ddplab.common import mlp


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_all_reduce_of_ranks_is_n_n_minus_1_over_2(world_size):
    reports = ddplab.run(check.report, world_size)
    assert [r["rank"] for r in reports] == list(range(world_size))
    assert {r["rank_sum"] for r in reports} == {world_size * (world_size - 1) // 2}
    assert len({r["pid"] for r in reports}) == world_size  # one process per rank
    # What each rank saw is what the call says it ran on (gloo on CPU on a machine with fewer
    # than two GPUs; NCCL on CUDA with more: engine.placement), and one placement serves every
    # world size (test_placement.py)
    assert {r["backend"] for r in reports} == {reports.backend}
    assert {r["device"].split(":")[0] for r in reports} == {reports.device}


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_ddp_gradient_equals_one_process_on_the_concatenated_batch(world_size):
    seed, batch_size = 3, 5
    results = ddplab.run(check.ddp_step, world_size, batch_size=batch_size, seed=seed)
    # Reference: one process, no DDP, the ranks' batches concatenated, the same mean loss.
    model = mlp.make_model(check.LAYERS, seed)
    X = torch.cat([torch.as_tensor(r["X"]) for r in results])
    y = torch.cat([torch.as_tensor(r["y"]) for r in results])
    assert X.shape[0] == world_size * batch_size
    F.mse_loss(model(X), y).backward()
    for r in results:
        for name, param in model.named_parameters():
            torch.testing.assert_close(torch.as_tensor(r["grads"][name]), param.grad)
    if world_size > 1:  # the ranks' batches differ, so the check above is not vacuous
        assert not np.allclose(results[0]["X"], results[1]["X"])
