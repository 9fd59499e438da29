"""DataParallel against DDP, and DataLoader workers per rank: each against what the test works
out itself (one process on the whole batch, torch's own DistributedSampler, counts by hand)."""

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from conftest import ddplab_json
from ddplab.chapters.training_loop import data_parallel, loader_workers
from ddplab.common import mlp


def one_process_grad(world_size, batch_size, seed=0):
    model = mlp.make_model(data_parallel.LAYERS, seed)
    X, y = mlp.make_batch(data_parallel.LAYERS, batch_size, world_size, seed, 0)
    F.mse_loss(model(X), y).backward()
    return mlp.flat_grad(model).numpy(), model, X, y


def test_ddp_is_one_process_per_rank_and_averages_to_dataparallels_gradient():
    result = data_parallel.run(world_size=2, batch_size=4)
    whole, model, X, y = one_process_grad(2, 4)
    np.testing.assert_allclose(result.dp_grad, whole, atol=1e-6)
    np.testing.assert_allclose(result.ddp_grads, np.stack([whole] * 2), atol=1e-6)
    model.zero_grad()
    F.mse_loss(model(X[:4]), y[:4]).backward()  # rank 0's own share alone
    assert np.abs(mlp.flat_grad(model).numpy() - whole).max() > 1e-3  # so the above can fail
    assert result.ddp_processes == 2 and os.getpid() not in result.ddp_pids
    assert result.dp_processes == 1 and result.caller_pid == os.getpid()
    assert result.ddp_allreduces == [1, 1]  # iteration 0: one bucket of every parameter


@pytest.mark.skipif(torch.cuda.is_available(), reason="what DataParallel does without a GPU")
def test_without_a_gpu_dataparallel_just_calls_the_module():
    result = data_parallel.run(world_size=1, batch_size=2)
    assert result.dp_device_ids == [] and result.dp_output_is_module


def sampler_order(size, world_size, rank, epoch, seed=0):
    sampler = DistributedSampler(range(size), num_replicas=world_size, rank=rank,
                                 shuffle=True, seed=seed)
    sampler.set_epoch(epoch)
    return list(sampler)


def test_every_rank_starts_its_own_workers_and_persistent_ones_serve_every_epoch():
    kept = loader_workers.run(world_size=2, num_workers=2, persistent_workers=True)
    assert kept.worker_processes == 2 * 2  # world_size x num_workers
    assert kept.same_workers_every_epoch and kept.worker_seeds_differ
    fresh = loader_workers.run(world_size=2, num_workers=2)
    assert fresh.worker_processes == 4 and not fresh.same_workers_every_epoch
    assert not kept.loaders(0) & fresh.loaders(0)  # other processes: the first ones ended
    for epoch in (0, 1):
        assert kept.orders(epoch) == [sampler_order(16, 2, r, epoch) for r in (0, 1)]
    assert kept.orders(0) != kept.orders(1)  # set_epoch reshuffled


def test_the_order_is_the_samplers_whatever_num_workers():
    orders = loader_workers.orders(world_size=2, num_workers=(0, 3), dataset_size=10)
    assert orders.same and len(orders.orders) == 2
    # 10 samples on 2 ranks: 5 each, the sampler's own
    assert orders.orders[0][1] == [sampler_order(10, 2, r, 1) for r in (0, 1)]


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_workers=0, persistent_workers=True), "persistent_workers needs num_workers"),
    (dict(num_workers=-1), "num_workers must be"),
    (dict(dataset_size=0), "dataset_size must be"),
])
def test_bad_loader_input_is_a_clear_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        loader_workers.run(**kwargs)


def test_cli_commands_report_the_counts():
    data = ddplab_json("loader-workers", "--world-size", "3", "--num-workers", "1")
    assert data["worker_processes"] == 3 and data["same_workers_every_epoch"] is False
    data = ddplab_json("data-parallel", "--world-size", "2")
    assert data["ddp_processes"] == 2 and data["max_grad_diff"] < 1e-6
