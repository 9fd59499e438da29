"""Collectives that pair with the wrong partner, each against a reference computed here in one
process: Join with a per-step loss all-reduce (a wrong value, then gloo's abort), the two ways
to log under Join, the silent mix of a count all-reduce with a dangling bucket all-reduce, and
what TORCH_DISTRIBUTED_DEBUG=DETAIL does and does not catch.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ddplab.chapters.hangs import join_logging, silent_mix, uneven
from ddplab.common import mlp

T = 2.0  # seconds: the hang timeout of these tests


def one_process_join_losses(counts, batch_size=4, seed=0):
    """Join's training in one process; per step the loss of each rank that took it."""
    world_size = len(counts)
    model = mlp.make_model(uneven.LAYERS, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=uneven.LR)
    per_step = []
    for step in range(max(counts)):
        X, y = mlp.make_batch(uneven.LAYERS, batch_size, world_size, seed, step)
        optimizer.zero_grad()
        losses = {}
        for r in range(world_size):
            if step < counts[r]:
                rows = slice(r * batch_size, (r + 1) * batch_size)
                losses[r] = F.mse_loss(model(X[rows]), y[rows])
                (losses[r] / world_size).backward()
        optimizer.step()
        per_step.append({r: loss.item() for r, loss in losses.items()})
    return per_step


def test_join_with_a_per_step_loss_all_reduce_logs_a_wrong_value_then_gloo_aborts():
    result = join_logging.run(fix="none")
    reference = one_process_join_losses([2, 3])
    # The even steps log the right mean; rank 1's extra step logs half its own loss: its
    # all-reduce met one of Join's, to which rank 0 added nothing.
    for step in range(2):
        assert result.logged[1][step] == pytest.approx(np.mean(list(reference[step].values())))
    assert result.own_losses[1][2] == pytest.approx(reference[2][1], abs=1e-6)
    assert result.logged[1][2] == pytest.approx(reference[2][1] / 2, abs=1e-6)
    assert "was killed by SIGABRT" in result.error
    assert "Received data size doesn't match expected size" in result.error


@pytest.mark.parametrize("fix", ["joinable", "after-join"])
def test_logging_under_join_matches_the_one_process_losses(fix):
    result = join_logging.run(fix=fix)
    assert result.error is None
    reference = one_process_join_losses([2, 3])
    means = [np.mean(list(step.values())) for step in reference]
    if fix == "joinable":
        assert result.logged[1] == pytest.approx(means, abs=1e-6)
        assert result.logged[0] == pytest.approx(means[:2], abs=1e-6)  # rank 0 had joined
    else:
        epoch_mean = np.mean([loss for step in reference for loss in step.values()])
        assert result.logged == [pytest.approx([epoch_mean], abs=1e-6)] * 2
    # The per-step all-reduce of the broken version is what makes the difference.
    assert abs(means[2] - means[2] / 2) > 0.1


def one_process_mix(seed=0):
    """The model after the two steps both ranks take; rank 0's counts with it; rank 1's own
    gradient on its third batch."""
    model = mlp.make_model(silent_mix.LAYERS, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=uneven.LR)
    B = silent_mix.BATCH_SIZE
    batches = [mlp.make_batch(silent_mix.LAYERS, B, 2, seed, step) for step in range(3)]
    for X, y in batches[:2]:
        optimizer.zero_grad()
        (F.mse_loss(model(X[:B]), y[:B]) + F.mse_loss(model(X[B:]), y[B:])).div(2).backward()
        optimizer.step()
    with torch.no_grad():
        counts0 = sum(torch.histc(model(X[:B]), bins=5, min=-silent_mix.RANGE,
                                  max=silent_mix.RANGE) for X, _ in batches[:2])
    X, y = batches[2]
    optimizer.zero_grad()
    F.mse_loss(model(X[B:]), y[B:]).backward()
    return counts0.numpy(), mlp.flat_grad(model).numpy()


def test_the_count_all_reduce_pairs_with_the_dangling_bucket_silently():
    result = silent_mix.run(mode="ddp", timeout=T)
    counts0, grad1 = one_process_mix()
    assert result.steps_completed_per_rank == [2, 3]  # rank 1 took its extra step
    assert result.errors == [None, None]
    np.testing.assert_allclose(result.own_counts[0], counts0)
    np.testing.assert_allclose(result.own_grads[1][2], grad1, atol=1e-6)
    # Rank 0's counts came back with half of rank 1's gradient in them (in the bucket's
    # order, which is not the parameters' order); rank 1 stepped with rank 0's counts.
    np.testing.assert_allclose(np.sort(result.rank0_counts_extra), np.sort(grad1 / 2),
                               atol=1e-6)
    np.testing.assert_allclose(np.sort(result.rank1_extra_step_mixed), np.sort(counts0),
                               atol=1e-6)
    assert counts0.sum() == 8  # rank 0's 8 predictions, all inside the bins
    # Then rank 1 waits in its own count all-reduce, and the check-in names it.
    assert result.outcome == "hung" and result.missing_ranks == [1]


def test_detail_does_not_catch_the_mix_of_two_same_sized_all_reduces():
    result = silent_mix.run(mode="detail", timeout=T)
    counts0, grad1 = one_process_mix()
    assert result.errors == [None, None]
    np.testing.assert_allclose(result.rank1_extra_step_mixed, counts0 / 2, atol=1e-6)
    np.testing.assert_allclose(result.rank0_counts_extra, grad1, atol=1e-6)
    assert result.outcome == "hung" and result.missing_ranks == [1]


def test_detail_names_the_mismatch_when_the_sizes_differ():
    result = silent_mix.run(mode="detail", metric_size=6, timeout=T)
    assert result.outcome == "finished"  # each rank caught its RuntimeError
    for rank, message in enumerate(result.errors):
        assert message.startswith("Detected mismatch between collectives on ranks. "
                                  f"Rank {rank} is running collective: CollectiveFingerPrint(")
    assert "TensorShape=[6]" in result.errors[0] and "TensorShape=[5]" in result.errors[0]
    assert "Tensor shapes: 6vs 5" in result.errors[0]


def test_ddp_on_a_detail_group_crashes_in_this_torch():
    """torch 2.13.0+cpu: Logger.set_construction_data_and_log on a ProcessGroupWrapper."""
    result = silent_mix.run(mode="detail-ddp", timeout=T)
    assert result.outcome == "died"
    assert "was killed by SIGSEGV" in result.error
    assert result.steps_completed_per_rank == [0, 0]


@pytest.mark.parametrize("run, kwargs, match", [
    (silent_mix.run, {"mode": "info"}, "mode must be one of"),
    (silent_mix.run, {"world_size": 3}, "world_size"),
    (silent_mix.run, {"metric_size": 0}, "metric_size"),
    (join_logging.run, {"fix": "sum"}, "fix must be one of"),
    (join_logging.run, {"world_size": 1}, "world_size"),
])
def test_bad_input_fails_before_any_rank_starts(run, kwargs, match):
    with pytest.raises(ValueError, match=match):
        run(**kwargs)


def test_cli_silent_mix_and_join_logging_report_as_json():
    from conftest import ddplab_json

    mixed = ddplab_json("silent-mix", "--timeout", "2")
    assert mixed["outcome"] == "hung" and mixed["missing_ranks"] == [1]
    assert sorted(np.round(mixed["rank1_extra_step_mixed"], 4)) == sorted(mixed["own_counts"][0])
    logged = ddplab_json("join-logging", "--fix", "joinable")
    assert logged["error"] is None and logged["max_diff_logged"] < 1e-6
