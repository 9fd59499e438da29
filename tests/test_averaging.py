"""The averaging experiment against gradients this test computes itself, in one process."""

import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import TORCHRUN, ddplab_json
from ddplab.chapters.averaging import averaging, per_node
from ddplab.common import mlp


def one_process_grad(batch_sizes, reduction, seed, rows=None):
    """The gradient of the loss over the given rows of the dataset, no DDP, one process."""
    model = mlp.make_model(averaging.LAYERS, seed, activation=torch.nn.Tanh)
    X, y = averaging.make_data(seed, sum(batch_sizes))
    if rows is not None:
        X, y = X[rows], y[rows]
    F.mse_loss(model(X), y, reduction=reduction).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()]).numpy()


@pytest.mark.parametrize("world_size, batch_size", [(1, 5), (2, 3), (3, 8), (5, 2)])
def test_mean_loss_ddp_and_naive_equal_one_process_on_the_concatenated_batch(world_size,
                                                                              batch_size):
    result = averaging.run(world_size=world_size, batch_size=batch_size, seed=7)
    batch_sizes = [batch_size] * world_size
    reference = one_process_grad(batch_sizes, "mean", 7)
    np.testing.assert_allclose(result.reference_grad, reference, atol=1e-7)
    for rank in range(world_size):
        np.testing.assert_allclose(result.ddp_grads[rank], reference, atol=1e-6)
        np.testing.assert_allclose(result.naive_grads[rank], reference, atol=1e-6)
        rows = slice(rank * batch_size, (rank + 1) * batch_size)
        np.testing.assert_allclose(result.local_grads[rank],
                                   one_process_grad(batch_sizes, "mean", 7, rows), atol=1e-6)
    if world_size > 1:  # the local gradients really differ, so the checks above bite
        assert np.abs(result.local_grads[0] - result.local_grads[1]).max() > 1e-3


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_summed_loss_is_world_size_times_smaller_and_both_fixes_work(world_size):
    batch_sizes = [6] * world_size
    reference_sum = one_process_grad(batch_sizes, "sum", 1)
    summed = averaging.run(world_size=world_size, batch_size=6, reduction="sum", seed=1)
    np.testing.assert_allclose(summed.ddp_grads[0] * world_size, reference_sum, rtol=1e-5,
                               atol=1e-5)
    assert summed.ratio_to_reference == pytest.approx(1 / world_size, rel=1e-5)
    fixed = averaging.run(world_size=world_size, batch_size=6, reduction="sum", seed=1,
                          correction="world_size")
    np.testing.assert_allclose(fixed.ddp_grads[0], reference_sum, rtol=1e-5, atol=1e-5)
    mean = averaging.run(world_size=world_size, batch_size=6, reduction="mean", seed=1)
    np.testing.assert_allclose(mean.ddp_grads[0] * sum(batch_sizes), reference_sum, rtol=1e-5,
                               atol=1e-5)


def test_unequal_counts_bias_the_mean_of_means_and_the_global_count_fixes_it():
    batch_sizes = [8, 8, 8, 2]
    reference = one_process_grad(batch_sizes, "mean", 0)
    biased = averaging.run(world_size=4, batch_sizes=batch_sizes)
    # What DDP computes without the fix: the plain mean of the per-rank mean-loss gradients.
    starts = np.cumsum([0] + batch_sizes)
    per_rank = [one_process_grad(batch_sizes, "mean", 0, slice(a, b))
                for a, b in zip(starts[:-1], starts[1:])]
    np.testing.assert_allclose(biased.ddp_grads[0], np.mean(per_rank, axis=0), atol=1e-6)
    assert np.abs(biased.ddp_grads[0] - reference).max() > 1e-2
    fixed = averaging.run(world_size=4, batch_sizes=batch_sizes, correction="global_count")
    np.testing.assert_allclose(fixed.ddp_grads[0], reference, atol=1e-6)


@pytest.mark.parametrize("nodes, gpus_per_node", [(2, 2), (2, 3), (3, 1)])
def test_ddp_divides_by_the_world_size_not_the_gpus_per_node(nodes, gpus_per_node):
    layout = per_node.node_average(nodes=nodes, gpus_per_node=gpus_per_node, batch_size=4)
    world_size = nodes * gpus_per_node
    assert layout.divisor == pytest.approx(world_size, rel=1e-4)
    assert layout.node_of_rank == [r // gpus_per_node for r in range(world_size)]
    assert layout.local_rank_of_rank == [r % gpus_per_node for r in range(world_size)]
    # Equal shards, mean loss: the local gradients average to one process's, so sum to W times it.
    np.testing.assert_allclose(layout.summed_grad,
                               world_size * one_process_grad([4] * world_size, "mean", 0),
                               atol=1e-5)
    for node in range(nodes):
        mine = layout.local_grads[node * gpus_per_node:(node + 1) * gpus_per_node]
        np.testing.assert_allclose(layout.node_averages[node], mine.mean(0), atol=1e-6)
    np.testing.assert_allclose(layout.ddp_grad,
                               one_process_grad([4] * world_size, "mean", 0), atol=1e-6)


def test_kept_node_subgroups_follow_the_layout_at_one_world_size():
    """The ranks keep their per-node subgroups between calls, by layout: at world size 4,
    2 x 2, then 4 x 1, then 2 x 2 again and 1 x 4 each average over their own nodes (a kept
    set reused for another layout would average 4 x 1 over pairs)."""
    for nodes, gpus_per_node in [(2, 2), (4, 1), (2, 2), (1, 4)]:
        layout = per_node.node_average(nodes=nodes, gpus_per_node=gpus_per_node, batch_size=3)
        for node in range(nodes):
            mine = layout.local_grads[node * gpus_per_node:(node + 1) * gpus_per_node]
            np.testing.assert_allclose(layout.node_averages[node], mine.mean(0), atol=1e-6)
        assert layout.divisor == pytest.approx(4, rel=1e-4)


@pytest.mark.parametrize("kwargs, match", [
    ({"reduction": "avg"}, "reduction must be"),
    ({"batch_size": 0}, "batch_size must be a positive int"),
    ({"world_size": 3, "batch_sizes": [1, 2]}, "one entry per rank"),
    ({"correction": "bogus"}, "correction must be one of"),
    ({"world_size": 65}, "world_size must be"),
    ({"naive": "no"}, "naive must be"),
])
def test_bad_input_is_a_clear_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        averaging.run(**kwargs)


def test_leaving_out_the_naive_loop_changes_no_other_gradient():
    both = averaging.run(world_size=3, batch_size=5)
    ddp_only = averaging.run(world_size=3, batch_size=5, naive=False)
    assert ddp_only.naive_grads is None and both.naive_grads is not None
    for field in ("local_grads", "ddp_grads", "reference_grad"):
        np.testing.assert_array_equal(getattr(ddp_only, field), getattr(both, field))
    with pytest.raises(ValueError, match="naive=False"):
        _ = ddp_only.max_diff_naive
    assert "naive" not in ddp_only.describe() and "naive" in both.describe()


def test_cli_json_has_the_documented_fields_in_parameter_order():
    data = ddplab_json("averaging", "--world-size", "3", "--batch-size", "4", "--reduction", "sum",
                       "--seed", "2")
    assert (data["world_size"], data["batch_size"], data["reduction"]) == (3, 4, "sum")
    model = mlp.make_model(averaging.LAYERS, 2, activation=torch.nn.Tanh)
    assert data["param_names"] == [name for name, _ in model.named_parameters()]
    n = sum(p.numel() for p in model.parameters())
    assert np.shape(data["local_grads"]) == (3, n) and np.shape(data["ddp_grads"]) == (3, n)
    reference = one_process_grad([4] * 3, "sum", 2)
    np.testing.assert_allclose(data["reference_grad"], reference, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(data["ddp_grads"]) * 3, [reference] * 3, rtol=1e-5,
                               atol=1e-5)
    for rank in range(3):
        rows = slice(rank * 4, (rank + 1) * 4)
        np.testing.assert_allclose(data["local_grads"][rank],
                                   one_process_grad([4] * 3, "sum", 2, rows), atol=1e-5)


def test_torchrun_gives_the_local_pools_gradients():
    local = ddplab_json("averaging", "--world-size", "2", "--batch-size", "4", "--seed", "3")
    launched = ddplab_json("averaging", "--batch-size", "4", "--seed", "3", torchrun=2)
    assert launched["world_size"] == 2
    for key in ("local_grads", "ddp_grads", "reference_grad"):
        np.testing.assert_allclose(launched[key], local[key], atol=1e-6)


def test_the_plain_training_script_runs_under_torchrun_and_matches_one_process():
    """train_ddp.py, the listing of the chapter, started as the page says: 2 processes split
    each global batch and train the same model as 1 process does, to the noise level (0.01)."""
    def losses(processes):
        done = subprocess.run([TORCHRUN, "--standalone", "--nproc-per-node", str(processes),
                               "-m", "ddplab.chapters.averaging.train_ddp"],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return [float(line.rsplit(" ", 1)[1]) for line in done.stdout.splitlines()]

    two, one = losses(2), losses(1)
    assert len(two) == 5
    np.testing.assert_allclose(two, one, atol=1e-5)
    assert max(two) < 0.02
