"""Why an N-rank run differs from one process: the ranks' DistributedSamplers together yield the
samples of one ``DistributedSampler(num_replicas=1)`` at every step (checked here on the samplers
alone), the run on the same samples differs by rounding only, and each expected cause by far
more."""

import pytest
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from ddplab.chapters.training_loop import expected_differences


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_the_ranks_samplers_together_are_one_samplers_batches(world_size):
    dataset, batch_size = range(96), 4
    for epoch in range(3):
        ranks = []
        for rank in range(world_size):
            sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=5)
            sampler.set_epoch(epoch)
            ranks.append(list(sampler))
        one = DistributedSampler(dataset, num_replicas=1, rank=0, seed=5)
        one.set_epoch(epoch)
        one = list(one)
        global_batch = batch_size * world_size
        for step in range(len(dataset) // global_batch):
            rows = slice(step * batch_size, (step + 1) * batch_size)
            together = sorted(i for r in ranks for i in r[rows])
            assert together == sorted(one[step * global_batch:(step + 1) * global_batch])
        # a plain shuffle draws other batches: the claim the page's "data order" row rests on
        plain = next(iter(DataLoader(dataset, batch_size=global_batch, shuffle=True,
                                     generator=torch.Generator().manual_seed(5 + epoch))))
        assert sorted(plain.tolist()) != sorted(one[:global_batch])


def test_rounding_only_on_the_same_samples_and_each_cause_far_larger():
    result = expected_differences.run(world_size=2, steps=6, dataset_size=64)
    assert result.same_samples
    rounding = result.size(expected_differences.FLOAT_ORDER)
    assert rounding["params_first"] < 1e-6 and rounding["loss"] < 1e-5
    for cause in (expected_differences.BATCHNORM, expected_differences.DROPOUT_PER_RANK,
                  expected_differences.DROPOUT_ONE_SEED, expected_differences.DATA_ORDER,
                  expected_differences.NO_SAMPLER):
        assert result.size(cause)["params_first"] > 1e-4, cause
    assert result.size(expected_differences.LOGGED)["loss"] > 1e-3
    assert len(result.describe().splitlines()) == 3 + len(expected_differences.CAUSES)


@pytest.mark.parametrize("kwargs", [dict(world_size=3), dict(dataset_size=100),
                                    dict(steps=0), dict(world_size=0)])
def test_bad_input_is_a_value_error_in_the_caller(kwargs):
    with pytest.raises(ValueError):
        expected_differences.run(**kwargs)
