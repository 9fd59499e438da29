"""The sharding experiment against DistributedSampler used directly in this process.

The reference builds ``DistributedSampler(range(N), num_replicas=W, rank=r, ...)`` for each
rank by hand, with no process group, and cuts its order into batches with plain slicing; the
experiment ran a DataLoader over a sampler that took its world size and rank from a real group.
"""

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from conftest import ddplab_json
from ddplab.chapters.sharding import sharding, validation


def reference(N, W, B, epochs, shuffle, drop_last, set_epoch, seed, loader_drop_last=False):
    """[epoch][rank][step] -> indices, from W hand-built samplers and list slicing."""
    out = [[] for _ in range(epochs)]
    for r in range(W):
        sampler = DistributedSampler(range(N), num_replicas=W, rank=r, shuffle=shuffle,
                                     seed=seed, drop_last=drop_last)
        for e in range(epochs):
            if set_epoch:
                sampler.set_epoch(e)
            order = list(sampler)
            batches = [order[i:i + B] for i in range(0, len(order), B)]
            if loader_drop_last and batches and len(batches[-1]) < B:
                batches.pop()
            out[e].append(batches)
    return out


CASES = [  # N, W, B, epochs, shuffle, drop_last, set_epoch, seed, loader_drop_last
    (10, 4, 2, 2, True, False, True, 0, False),
    (10, 4, 3, 2, False, True, True, 0, False),
    (7, 3, 2, 3, True, False, False, 5, False),
    (2, 5, 1, 1, True, False, True, 3, False),  # padding longer than the dataset: wraps twice
    (13, 4, 3, 2, True, False, True, 1, True),
    (12, 1, 5, 2, True, False, True, 0, False),
    (11, 3, 20, 1, True, True, True, 2, False),  # a batch larger than the shard
]


@pytest.mark.parametrize("case", CASES)
def test_every_batch_matches_distributed_sampler_used_directly(case):
    N, W, B, E, shuffle, drop_last, set_epoch, seed, loader_drop_last = case
    result = sharding.run(dataset_size=N, world_size=W, batch_size=B, epochs=E,
                          shuffle=shuffle, drop_last=drop_last, set_epoch=set_epoch, seed=seed,
                          loader_drop_last=loader_drop_last)
    expected = reference(N, W, B, E, shuffle, drop_last, set_epoch, seed, loader_drop_last)
    assert result.indices == expected
    assert result.samples_per_rank == len(DistributedSampler(range(N), num_replicas=W, rank=0,
                                                             drop_last=drop_last))
    assert result.steps_per_epoch == len(expected[0][0])
    for e in range(E):  # the all-reduced sizes are the sums of the ranks' batch sizes
        assert result.global_batch_sizes[e] == [sum(len(expected[e][r][s]) for r in range(W))
                                                for s in range(len(expected[e][0]))]


def test_hand_counted_padding_and_drop_last():
    padded = sharding.run(dataset_size=10, world_size=4, batch_size=2, epochs=1, shuffle=False)
    assert (padded.samples_per_rank, padded.steps_per_epoch) == (3, 2)  # ceil(10/4) = 3
    assert padded.global_batch_sizes == [[8, 4]] and padded.samples_per_epoch(0) == 12
    assert padded.indices[0] == [[[0, 4], [8]], [[1, 5], [9]], [[2, 6], [0]], [[3, 7], [1]]]
    assert padded.times_drawn(0).tolist() == [2, 2, 1, 1, 1, 1, 1, 1, 1, 1]
    dropped = sharding.run(dataset_size=10, world_size=4, batch_size=2, epochs=1,
                           shuffle=False, drop_last=True)
    assert (dropped.samples_per_rank, dropped.steps_per_epoch) == (2, 1)  # floor(10/4) = 2
    assert dropped.global_batch_sizes == [[8]]
    assert dropped.times_drawn(0).tolist() == [1] * 8 + [0, 0]


def test_the_sample_grid_draws_a_cell_per_draw_and_outlines_the_padding():
    """Hand-counted, 10 samples on 4 ranks without shuffle: 12 cells, samples 0 and 1 drawn
    twice (4 cells outlined); below, 12 rank parts over 10 indices, 2 of them outlined. With
    drop_last: 8 cells, none outlined, 2 indices hatched as never drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ddplab.chapters.sharding import plots

    def counts(ax):  # the panel's collections, in the order they are added
        return [len(c.get_paths()) for c in ax.collections]

    padded = plots.draws(sharding.run(dataset_size=10, world_size=4, batch_size=2, epochs=1,
                                      shuffle=False))
    assert counts(padded.axes[0]) == [12, 4]  # cells, outlines
    assert counts(padded.axes[1]) == [12, 0, 2]  # rank parts, never drawn, drawn twice
    dropped = plots.draws(sharding.run(dataset_size=10, world_size=4, batch_size=2, epochs=1,
                                       shuffle=False, drop_last=True))
    assert counts(dropped.axes[0]) == [8, 0]
    assert counts(dropped.axes[1]) == [8, 2, 0]
    assert dropped.axes[1].collections[1].get_hatch() == "////"
    plt.close("all")


def test_the_forum_sizes_2_nodes_x_4_gpus_with_256_per_rank():
    kept = sharding.run(dataset_size=10_000, world_size=8, batch_size=256, epochs=1)
    assert kept.global_batch_sizes == [[2048] * 4 + [10_000 - 4 * 2048]]
    assert kept.steps_per_epoch == 5 and kept.times_drawn(0).tolist() == [1] * 10_000
    divided = sharding.run(dataset_size=10_000, world_size=8, batch_size=32, epochs=1)
    one = sharding.run(dataset_size=10_000, world_size=1, batch_size=256, epochs=1)
    assert divided.steps_per_epoch == one.steps_per_epoch == 40
    # The same seed: every global batch of 8 x 32 is the one-process batch of 256.
    for step in range(40):
        assert divided.step_batch(0, step) == sorted(one.indices[0][0][step])


def test_one_shared_permutation_per_epoch_and_the_same_one_without_set_epoch():
    result = sharding.run(dataset_size=9, world_size=3, batch_size=2, epochs=3, seed=11)
    for e in range(3):
        g = torch.Generator().manual_seed(11 + e)
        assert result.order(e) == torch.randperm(9, generator=g).tolist()
    assert not result.same_order_every_epoch()
    frozen = sharding.run(dataset_size=9, world_size=3, batch_size=2, epochs=3, seed=11,
                          set_epoch=False)
    assert frozen.same_order_every_epoch()
    assert frozen.indices[0] == result.indices[0]


def test_without_a_sampler_every_rank_draws_the_whole_dataset_in_the_same_order():
    result = sharding.run(dataset_size=10, world_size=3, batch_size=4, epochs=2, seed=6,
                          sampler=False)
    torch.manual_seed(6)
    loader = DataLoader(range(10), batch_size=4, shuffle=True)
    expected = [[b.tolist() for b in loader] for _ in range(2)]
    assert expected[0] != expected[1]
    for e in range(2):
        assert result.indices[e] == [expected[e]] * 3
        assert result.times_drawn(e).tolist() == [3] * 10


def test_validation_counts_padding_twice_and_the_unpadded_shard_is_exact():
    N, W = 10, 4
    result = validation.run(dataset_size=N, world_size=W, batch_size=3, seed=0)
    X, y, model = validation.make_validation(0, N)
    with torch.no_grad():
        right = (model(X).argmax(1) == y).numpy().astype(int)
    for r in range(W):
        assert result.ids["padded"][r] == list(DistributedSampler(range(N), W, r,
                                                                  shuffle=False))
    padded_ids = [i for ids in result.ids["padded"] for i in ids]
    assert result.count["padded"] == 12 and result.correct["padded"] == right[padded_ids].sum()
    assert result.count["drop_last"] == 8
    assert (result.correct["exact"], result.count["exact"]) == (right.sum(), N)
    assert result.accuracy("exact") == result.reference == right.mean()
    assert result.accuracy("padded") != result.reference  # the case really differs
    assert result.times_evaluated("exact").tolist() == [1] * N


@pytest.mark.parametrize("kwargs, match", [
    ({"dataset_size": 0}, "dataset_size must be a positive int"),
    ({"batch_size": 0}, "batch_size must be a positive int"),
    ({"epochs": 0}, "epochs must be a positive int"),
    ({"world_size": 0}, "world_size must be a positive int"),
    ({"world_size": 65}, "world_size must be an int from 1 to 64"),
    ({"seed": 1.5}, "seed must be an int"),
    ({"shuffle": "yes"}, "shuffle must be True or False"),
    ({"dataset_size": 3, "world_size": 4, "drop_last": True}, "leaves every rank without"),
    ({"dataset_size": 10, "batch_size": 4, "loader_drop_last": True}, "without a batch"),
    ({"dataset_size": 600_000, "epochs": 2}, "at most"),
])
def test_bad_input_is_a_clear_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sharding.run(**kwargs)


def test_bad_evaluation_input_is_a_clear_error():
    with pytest.raises(ValueError, match="dataset_size 3 < world_size 4"):
        validation.run(dataset_size=3, world_size=4)


def test_cli_json_indices_are_epoch_rank_step():
    data = ddplab_json("sharding", "--world-size", "3", "--dataset-size", "11", "--batch-size", "2",
                       "--epochs", "2", "--shuffle", "--drop-last", "--seed", "4")
    assert data["indices"] == reference(11, 3, 2, 2, True, True, True, 4)
    # floor(11 / 3) = 3 samples per rank: a batch of 2, then one of 1, on each rank
    assert [[[len(b) for b in rank] for rank in epoch] for epoch in data["indices"]] == \
        [[[2, 1]] * 3] * 2
    assert data["samples_per_epoch"] == [9, 9] and data["global_batch_size"] == 6
    frozen = ddplab_json("sharding", "--world-size", "2", "--dataset-size", "5", "--epochs", "2",
                         "--shuffle", "--no-set-epoch")
    assert frozen["indices"] == reference(5, 2, 2, 2, True, False, False, 0)
    assert frozen["indices"][0] == frozen["indices"][1]


def test_torchrun_gives_the_local_pools_indices():
    args = ("--dataset-size", "9", "--batch-size", "2", "--epochs", "2", "--shuffle")
    local = ddplab_json("sharding", "--world-size", "2", *args)
    launched = ddplab_json("sharding", *args, torchrun=2)
    assert launched["world_size"] == 2
    assert launched["indices"] == local["indices"] == reference(9, 2, 2, 2, True, False, True, 0)
