"""The shard judges (``judges/shards.py``) on hand-built records, one test per branch:
``different-datasets``, ``same-batches``, ``overlapping-shards``."""

from __future__ import annotations

from ddplab.doctor.judging.findings import Status
from ddplab.doctor.judging.judges import data, shards
from ddplab.doctor.records import Seed
from judge_records import (
    FILE,
    earlier_finding,
    evidence,
    judge,
    loader,
    sampler_order,
    step,
    training_pass,
)


def datasets(prints: dict, **changes):
    return evidence({r: [loader(fingerprint=p, **changes), training_pass(0)]
                     for r, p in prints.items()})


def test_different_datasets_found_in_the_ranks_tensors():
    got = judge(shards.DIFFERENT_DATASETS, datasets({0: "tensors:9f2c,77aa", 1: "tensors:41d0,"
                                                                                "77aa"}))
    assert got.status == Status.FOUND
    assert ("shards a TensorDataset of 64 samples whose contents differ by rank (rank 0: "
            "9f2c,77aa, rank 1: 41d0,77aa, the digests of each rank's tensors)") in got.why
    assert got.problems[0].line == 20 and "manual_seed(0)" in got.problems[0].fix


def test_different_datasets_found_in_the_indices_of_each_ranks_subset():
    """random_split without a generator: each rank's Subset took other indices."""
    got = judge(shards.DIFFERENT_DATASETS, datasets(
        {0: "subset:03be1c2d:ToyDataset:80", 1: "subset:e5a0f911:ToyDataset:80"},
        dataset="Subset"))
    assert got.status == Status.FOUND
    assert ("(rank 0: 03be1c2d, rank 1: e5a0f911, the digests of the indices each rank's "
            "Subset took)") in got.why


def test_different_datasets_passes_one_dataset_on_every_rank():
    got = judge(shards.DIFFERENT_DATASETS, datasets({0: "tensors:9f2c", 1: "tensors:9f2c"}))
    assert got.status == Status.PASSED and "holds the same dataset" in got.why


def test_different_datasets_not_applicable_to_a_dataset_it_cannot_compare():
    """A Dataset class of the reader's: its fingerprint is its type and length only. And a
    loader without a DistributedSampler is no-distributed-sampler's."""
    for prints, changes in (({0: "ToyDataset:64", 1: "ToyDataset:64"}, {}),
                            ({0: "tensors:9f2c", 1: "tensors:41d0"}, {"distributed": False})):
        got = judge(shards.DIFFERENT_DATASETS, datasets(prints, **changes))
        assert got.status == Status.NOT_APPLICABLE
        assert "no sharded training loader over a TensorDataset or a Subset" in got.why


def test_different_datasets_not_applicable_on_one_rank():
    got = judge(shards.DIFFERENT_DATASETS, datasets({0: "tensors:9f2c"}))
    assert got.status == Status.NOT_APPLICABLE and got.why == "one rank"


def forwards(digests: dict, seeds: dict | None = None):
    """Per rank: its seed (if any), then one optimizer step per digest of its forward."""
    return evidence({r: ([Seed(file=FILE, line=8, seed=seeds[r])] if seeds else [])
                     + [step(n + 1, digests=[d]) for n, d in enumerate(ds)]
                     for r, ds in digests.items()})


def test_same_batches_found_in_the_same_steps_after_one_seed():
    ev = forwards({0: ["7ae16f89", "2963ef0b"], 1: ["7ae16f89", "2963ef0b"]}, {0: 0, 1: 0})
    got = judge(shards.SAME_BATCHES, ev)
    assert got.status == Status.FOUND
    assert ("of the 2 batches rank 1 trained on, 2 are byte-identical to batches rank 0 trained "
            "on (all in the same step; digest 7ae16f89 on both), after torch.manual_seed(0) at "
            "train.py:8 on every rank") in got.why
    assert got.problems[0].line == 8 and "dist.get_rank()" in got.problems[0].fix


def test_same_batches_found_some_steps_apart_without_a_common_seed():
    """Rank 0 drew more random numbers (its evaluation) and runs one batch ahead."""
    ev = forwards({0: ["aa", "bb", "cc"], 1: ["zz", "aa", "bb"]}, {0: 0, 1: 1})
    got = judge(shards.SAME_BATCHES, ev)
    assert got.status == Status.FOUND
    assert ("of the 3 batches rank 1 trained on, 2 are byte-identical to batches rank 0 trained "
            "on (0 in the same step, the rest some steps apart; digest aa on both): the 2 "
            "ranks") in got.why
    assert got.problems[0].line == 45 and got.problems[0].fix is None  # the first step's


def test_same_batches_passes_different_batches():
    got = judge(shards.SAME_BATCHES, forwards({0: ["aa", "bb"], 1: ["cc", "dd"]}))
    assert got.status == Status.PASSED and "(2 forwards compared on each rank)" in got.why


def test_same_batches_not_applicable_without_a_forward_on_every_rank():
    got = judge(shards.SAME_BATCHES, forwards({0: ["aa"], 1: []}))
    assert got.status == Status.NOT_APPLICABLE and "no DDP forward" in got.why


def test_same_batches_not_applicable_where_no_distributed_sampler_found():
    got = judge(shards.SAME_BATCHES, forwards({0: ["aa"], 1: ["aa"]}),
                [earlier_finding(data.NO_DISTRIBUTED_SAMPLER)])
    assert got.status == Status.NOT_APPLICABLE
    assert got.why == "explained by no-distributed-sampler"


def test_same_batches_not_applicable_on_one_rank():
    got = judge(shards.SAME_BATCHES, forwards({0: ["aa"]}))
    assert got.status == Status.NOT_APPLICABLE and got.why == "one rank"


def orders(indices: dict, seeds=None, with_loader=True, passes=1, **changes):
    """Per rank, ``passes`` training passes, each after its sampler's order with
    ``indices[rank]`` (the same each pass)."""
    seeds = seeds or {r: 0 for r in indices}
    return evidence({r: ([loader()] if with_loader else [])
                     + [x for n in range(passes) for x in (
                         sampler_order(n, f"d{r}", indices=ix, seed=seeds[r], sampler_rank=r,
                                       **changes), training_pass(n))]
                     for r, ix in indices.items()})


def test_overlapping_shards_found_when_seeds_differ_by_rank():
    """Rank 0 took 0..31 of 64, rank 1 16..47: 16 shared, 16 seen by no rank."""
    got = judge(shards.OVERLAPPING_SHARDS, orders({0: list(range(32)), 1: list(range(16, 48))},
                                                  seeds={0: 0, 1: 1}))
    assert got.status == Status.FOUND
    assert ("in epoch 0 the DistributedSampler of the DataLoader made at train.py:20 gave the "
            "ranks 16 samples in common (e.g. 16, 17, 18, 19, 20, 21) and 16 of the 64 samples "
            "to no rank: the samplers' seeds differ by rank (rank 0: 0, rank 1: 1)") in got.why
    assert got.problems[0].line == 20 and "seed=seed" in got.problems[0].fix


def test_overlapping_shards_found_with_one_seed_and_no_loader_record():
    got = judge(shards.OVERLAPPING_SHARDS, orders({0: list(range(32)), 1: list(range(32))},
                                                  with_loader=False))
    assert got.status == Status.FOUND
    assert got.why.startswith("in epoch 0 the DistributedSampler gave the ranks 32 samples")
    assert "the ranks' samplers do not split one order" in got.why
    assert got.problems[0].line is None


def test_overlapping_shards_passes_the_padding_a_sampler_repeats():
    """63 samples over 2 ranks: the sampler pads to 64, repeating sample 0 on rank 1."""
    got = judge(shards.OVERLAPPING_SHARDS, orders(
        {0: list(range(0, 63, 2)), 1: [*range(1, 63, 2), 0]}, dataset_len=63, passes=2))
    assert got.status == Status.PASSED
    assert got.why.startswith("in 2 training passes, the ranks' DistributedSampler shards")


def test_overlapping_shards_passes_disjoint_shards():
    got = judge(shards.OVERLAPPING_SHARDS, orders({0: list(range(0, 64, 2)),
                                                   1: list(range(1, 64, 2))}))
    assert got.status == Status.PASSED and got.why.startswith("in 1 training pass, ")


def test_overlapping_shards_not_applicable_without_indices_from_every_rank():
    got = judge(shards.OVERLAPPING_SHARDS, orders({0: list(range(32)), 1: None}))
    assert got.status == Status.NOT_APPLICABLE and "whose indices every rank" in got.why


def test_overlapping_shards_not_applicable_on_one_rank():
    got = judge(shards.OVERLAPPING_SHARDS, orders({0: list(range(64))}))
    assert got.status == Status.NOT_APPLICABLE and got.why == "one rank"
