"""The silent differences of the chapter "Hangs and silent differences", each against a
reference computed here in one process: BatchNorm per rank and synced, ranks that start
different, checkpoints, the logged loss, unused parameters.
"""

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import ddplab_json
from ddplab.chapters.hangs import (
    batchnorm,
    checkpoints,
    logged_loss,
    start_state,
    unused_parameters,
)
from ddplab.common import mlp


def test_the_one_model_builder_gives_the_batchnorm_model_written_out():
    """mlp.make_model with a norm is the model the hangs chapter wrote by hand: Linear,
    BatchNorm1d, ReLU, Linear, the same weights from the same seed; without bias and with Tanh,
    the bucketed exercise's."""
    torch.manual_seed(3)
    by_hand = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6),
                                  torch.nn.ReLU(), torch.nn.Linear(6, 1))
    built = mlp.make_model((4, 6, 1), 3, norm=torch.nn.BatchNorm1d)
    assert [type(m) for m in built] == [type(m) for m in by_hand]
    for (name, a), (same, b) in zip(built.state_dict().items(), by_hand.state_dict().items(),
                                    strict=True):
        assert name == same
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    plain = mlp.make_model((5, 5, 5), 0, activation=torch.nn.Tanh, bias=False)
    assert [n for n, _ in plain.named_parameters()] == ["0.weight", "2.weight"]
    assert isinstance(plain[1], torch.nn.Tanh)


def one_process_bn(batch_size, seed=0, world_size=1):
    """The mean-loss gradient and outputs of the BatchNorm model when each of ``world_size``
    groups of rows is normalised on its own (1: one process on the whole batch); gradients
    averaged over the groups, as DDP does."""
    X, y = batchnorm.make_data(batch_size, seed)
    share = batch_size // world_size
    grads, outputs = [], []
    for r in range(world_size):
        model = mlp.make_model(batchnorm.LAYERS, seed, norm=torch.nn.BatchNorm1d)
        rows = slice(r * share, (r + 1) * share)
        output = model(X[rows])
        F.mse_loss(output, y[rows]).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]).numpy())
        outputs.append(output.detach().numpy().ravel())
    return np.mean(grads, axis=0), np.concatenate(outputs)


@pytest.mark.parametrize("world_size", [2, 4])
def test_batchnorm_per_rank_is_w_separate_normalisations_not_one(world_size):
    result = batchnorm.run(world_size=world_size, global_batch_size=8)
    grad, output = one_process_bn(8, world_size=world_size)
    np.testing.assert_allclose(result.grads, np.stack([grad] * world_size), atol=1e-5)
    np.testing.assert_allclose(result.outputs, output, atol=1e-6)
    whole_grad, _ = one_process_bn(8)
    assert np.abs(result.grads[0] - whole_grad).max() > 0.1  # differs from one process
    assert result.max_diff > 0.1
    assert result.torch_sync_error.startswith("ValueError: SyncBatchNorm expected input tensor "
                                              "to be on GPU")


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_sync_batchnorm_written_out_matches_one_process_on_the_whole_batch(world_size):
    result = batchnorm.run(world_size=world_size, global_batch_size=8, sync=True)
    grad, output = one_process_bn(8)
    np.testing.assert_allclose(result.grads, np.stack([grad] * world_size), atol=1e-5)
    np.testing.assert_allclose(result.outputs, output, atol=1e-6)
    model = mlp.make_model(batchnorm.LAYERS, 0, norm=torch.nn.BatchNorm1d)
    model(batchnorm.make_data(8, 0)[0])
    np.testing.assert_allclose(result.running_means, np.stack(
        [model[1].running_mean.numpy()] * world_size), atol=1e-6)
    assert result.max_diff < 1e-5


def test_broadcast_buffers_overwrites_every_ranks_running_mean_with_rank_0s():
    result = batchnorm.run(world_size=2, global_batch_size=8)
    assert np.abs(result.running_means[1] - result.running_means[0]).max() > 1e-3
    np.testing.assert_array_equal(result.running_means_next,
                                  np.stack([result.running_means[0]] * 2))


def test_batchnorm_bad_split_is_a_value_error():
    with pytest.raises(ValueError, match="equal shares"):
        batchnorm.run(world_size=3, global_batch_size=8)


def test_ddp_gives_every_rank_rank_0s_initial_weights():
    result = start_state.run(world_size=3)
    rank0 = torch.cat([p.detach().flatten() for p in
                       mlp.make_model(start_state.LAYERS, 0).parameters()]).numpy()
    np.testing.assert_array_equal(result.params_after, np.stack([rank0] * 3))
    assert result.max_diff_before > 0.1  # they did start different


def test_sampler_seed_must_be_shared_and_dropout_seed_must_differ():
    result = start_state.run(world_size=4, dataset_size=64)
    same = sorted(np.concatenate(result.sampler_indices["same"]).tolist())
    assert same == list(range(64))  # one epoch: every sample exactly once
    per_rank = np.concatenate(result.sampler_indices["per_rank"])
    assert len(set(per_rank.tolist())) < 64
    assert result.mask_agreement()["same"] == 1.0
    assert 0.3 < result.mask_agreement()["per_rank"] < 0.7


def test_checkpoint_module_state_loads_and_the_ddp_prefix_is_refused_then_stripped():
    result = checkpoints.run(world_size=2)
    keys = list(mlp.make_model(checkpoints.LAYERS, 0).state_dict())
    assert result.plain_keys == keys
    assert result.ddp_keys == ["module." + k for k in keys]
    assert "Missing key(s) in state_dict" in result.prefix_error
    assert 'Unexpected key(s) in state_dict: "module.0.weight"' in result.prefix_error
    assert result.max_diff_loaded == 0 and result.max_diff_stripped == 0
    assert result.files == ["ddp.pt", "model.pt"]
    assert result.directory_removed


def test_no_checkpoint_directory_is_left_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the caller's tempfile goes here
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    checkpoints.run(world_size=2)
    assert os.listdir(tmp_path) == []


def test_logged_loss_rank0_is_not_the_global_loss_the_mean_is():
    result = logged_loss.run(world_size=4, batch_size=4, steps=10)
    model = mlp.make_model(logged_loss.LAYERS, 0)
    optimizer = torch.optim.SGD(model.parameters(), lr=logged_loss.LR)
    reference, rank0 = [], []
    for step in range(10):
        X, y = logged_loss.make_noisy_batch(4, 4, 0, step)
        with torch.no_grad():
            rank0.append(F.mse_loss(model(X[:4]), y[:4]).item())
        optimizer.zero_grad()
        loss = F.mse_loss(model(X), y)
        loss.backward()
        optimizer.step()
        reference.append(loss.item())
    np.testing.assert_allclose(result.mean_losses, reference, atol=1e-5)
    np.testing.assert_allclose(result.rank_losses[0], rank0, atol=1e-5)
    assert result.max_diff_rank0 > 0.1


def test_unused_parameter_error_then_find_unused_parameters():
    result = unused_parameters.run(world_size=2, steps=5)
    assert result.steps_done == 1
    assert "Expected to have finished reduction in the prior iteration" in result.error
    assert "did not receive grad for rank 0: 4 5" in result.error
    assert result.steps_done_with_flag == 2 and result.aux_grad_is_none
    assert len(result.ms_with) == len(result.ms_without) == 5
    # speed is shown on the page, never asserted; the median is a measured step, the third
    assert result.median_ms_with == sorted(result.ms_with)[2]
    assert result.median_ms_without == sorted(result.ms_without)[2]


def test_cli_batchnorm_sync_json():
    report = ddplab_json("batchnorm", "--world-size", "2", "--global-batch-size", "8", "--sync")
    assert report["sync"] is True and report["max_diff"] < 1e-5
