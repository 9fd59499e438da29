"""The data judges (``judges/data.py``) on hand-built records, one test per branch:
``sampler-set-epoch``, ``no-distributed-sampler``, ``uneven-inputs``."""

from __future__ import annotations

from ddplab.doctor.judging.findings import Status
from ddplab.doctor.judging.judges import data
from ddplab.doctor.records import IterableCount, SetEpoch
from judge_records import evidence, judge, loader, sampler_order, training_pass

NOT_SHARDED = dict(sampler="RandomSampler", distributed=False, sampler_len=64)
STREAM = dict(dataset="TokenStream", dataset_len=None, fingerprint="TokenStream:None",
              iterable=True, sampler="_InfiniteConstantSampler", distributed=False,
              sampler_len=None)


def epochs(digests, calls=(), shuffle=True):
    """Both ranks: one loader, and a training pass per digest, each after its sampler's order
    (drawn at epoch 0) and after ``calls[i]``, a set_epoch, where given."""
    seen = [loader()]
    for number, digest in enumerate(digests):
        seen += [*calls[number:number + 1],
                 sampler_order(number, digest, shuffle=shuffle),
                 training_pass(number)]
    return evidence({0: seen, 1: seen})


def set_epoch(epoch: int) -> SetEpoch:
    return SetEpoch(sampler=0, epoch=epoch, file="train.py", line=28)


def test_sampler_set_epoch_found_when_two_epochs_repeat_one_order():
    got = judge(data.SAMPLER_SET_EPOCH, epochs(["eeb04bef5d175687"] * 2))
    assert got.status == Status.FOUND
    message = got.problems[0].message
    assert "made at train.py:20" in message and "set_epoch is never called" in message
    assert "first indices 44, 17, 47, 35, 33, 63, ... in both" in message
    assert got.problems[0].line == 30  # the second epoch's loop


def test_sampler_set_epoch_names_a_call_that_sets_one_epoch():
    got = judge(data.SAMPLER_SET_EPOCH, epochs(["same", "same"], [set_epoch(0)] * 2))
    assert got.status == Status.FOUND and "set_epoch(0) at train.py:28" in got.why


def test_sampler_set_epoch_names_a_call_after_the_iterator():
    """set_epoch(1) came, but the second epoch's order is the first's: it was called after
    ``iter(loader)`` had drawn the order."""
    got = judge(data.SAMPLER_SET_EPOCH, epochs(["same", "same"], [set_epoch(0), set_epoch(1)]))
    assert got.status == Status.FOUND
    assert "set_epoch is called after the loader's iterator was made" in got.why
    assert got.problems[0].evidence["set_epoch_calls"] == [{"epoch": 0, "line": 28},
                                                           {"epoch": 1, "line": 28}]


def test_sampler_set_epoch_passes_when_the_order_changes():
    got = judge(data.SAMPLER_SET_EPOCH, epochs(["eeb04bef5d175687", "92e8446b06960e94"]))
    assert got.status == Status.PASSED and "set_epoch was called" in got.why


def test_sampler_set_epoch_not_applicable_without_a_shuffling_sampler():
    got = judge(data.SAMPLER_SET_EPOCH, epochs(["a", "a"], shuffle=False))
    assert got.status == Status.NOT_APPLICABLE
    assert "no shuffling DistributedSampler was iterated for two training epochs" in got.why


def unsharded(firsts, **changes):
    """Two ranks, each a loader (``changes``) and one training pass whose first batch is
    ``firsts[rank]``."""
    return evidence({r: [loader(**changes), training_pass(0, first=first)]
                     for r, first in enumerate(firsts)})


def test_no_distributed_sampler_found_with_the_same_first_batches():
    got = judge(data.NO_DISTRIBUTED_SAMPLER, unsharded(["a1", "a1"], **NOT_SHARDED))
    assert got.status == Status.FOUND
    assert ("the DataLoader made at train.py:20 has no DistributedSampler: each of the 2 ranks "
            "draws all 64 samples every epoch in the same order (identical first batches), so "
            "an epoch is 2x the dataset") in got.why
    assert got.problems[0].line == 20 and got.problems[0].evidence["same_first_batch"]


def test_no_distributed_sampler_found_in_each_ranks_own_order():
    got = judge(data.NO_DISTRIBUTED_SAMPLER, unsharded(["a1", "b2"], **NOT_SHARDED))
    assert got.status == Status.FOUND
    assert "all 64 samples every epoch (in its own random order)" in got.why


def test_no_distributed_sampler_found_for_a_stream_every_rank_reads_whole():
    got = judge(data.NO_DISTRIBUTED_SAMPLER, unsharded(["a1", "a1"], **STREAM))
    assert got.status == Status.FOUND
    assert got.why == ("the DataLoader made at train.py:20 has no DistributedSampler: each of the "
                       "2 ranks reads the whole TokenStream (an IterableDataset that does not "
                       "split itself by rank) every epoch in the same order (identical first "
                       "batches), so an epoch is 2x the dataset and the ranks repeat each other's "
                       "work")


def test_no_distributed_sampler_passes_a_sharded_loader():
    got = judge(data.NO_DISTRIBUTED_SAMPLER, unsharded(["a1", "b2"]))
    assert got.status == Status.PASSED
    assert "sharded between the ranks (the DataLoader made at train.py:20)" in got.why


def test_no_distributed_sampler_passes_a_stream_that_differs_by_rank():
    """An IterableDataset split by rank in the script (its first batches differ)."""
    got = judge(data.NO_DISTRIBUTED_SAMPLER, unsharded(["a1", "b2"], **STREAM))
    assert got.status == Status.PASSED and "made at train.py:20" in got.why


def test_no_distributed_sampler_passes_data_that_differs_by_rank():
    """Each rank loads its own files: the fingerprints differ, nothing is repeated."""
    ev = evidence({r: [loader(**NOT_SHARDED, fingerprint=f"tensors:{r}a"), training_pass(0)]
                   for r in (0, 1)})
    got = judge(data.NO_DISTRIBUTED_SAMPLER, ev)
    assert got.status == Status.PASSED and "made at train.py:20" in got.why


def test_no_distributed_sampler_not_applicable_to_a_loader_one_rank_did_not_make():
    ev = evidence({0: [loader(**NOT_SHARDED), training_pass(0)], 1: [training_pass(0)]})
    got = judge(data.NO_DISTRIBUTED_SAMPLER, ev)
    assert got.status == Status.NOT_APPLICABLE
    assert got.why == "the DataLoader made at train.py:20 was not recorded on rank 1: not compared"
    got = judge(data.NO_DISTRIBUTED_SAMPLER, evidence({0: [training_pass(0)], 1: []}))
    assert got.status == Status.NOT_APPLICABLE
    assert got.why == "training DataLoader 0 was not recorded on ranks 0, 1: not compared"


def test_no_distributed_sampler_passes_the_loaders_every_rank_made_and_names_the_others():
    """Loader 0 sharded on both ranks; loader 1 made on rank 1 alone, first used by rank 0
    (which has no record of it); loader 2 made on rank 0 alone."""
    seen = {0: [loader(), training_pass(0), training_pass(0, loader=1),
                loader(index=2, line=24), training_pass(0, loader=2)],
            1: [loader(), training_pass(0), loader(index=1, line=22)]}
    got = judge(data.NO_DISTRIBUTED_SAMPLER, evidence(seen))
    assert got.status == Status.PASSED
    assert got.why == ("each training DataLoader is sharded between the ranks (the DataLoader "
                       "made at train.py:20); overlapping-shards compares the shards; the "
                       "DataLoader made at train.py:22 was not recorded on rank 0: not compared; "
                       "the DataLoader made at train.py:24 was not recorded on rank 1: not "
                       "compared")


def test_no_distributed_sampler_not_applicable_on_one_rank():
    got = judge(data.NO_DISTRIBUTED_SAMPLER, evidence({0: [loader(**NOT_SHARDED),
                                                          training_pass(0)]}))
    assert got.status == Status.NOT_APPLICABLE and got.why == "one rank"


def test_no_distributed_sampler_not_applicable_without_training():
    ev = evidence({r: [loader(), training_pass(0, training=False)] for r in (0, 1)})
    got = judge(data.NO_DISTRIBUTED_SAMPLER, ev)
    assert got.status == Status.NOT_APPLICABLE and "no DataLoader was used" in got.why


def test_uneven_inputs_found_with_the_batches_of_each_rank():
    """Three ranks: two of 4 batches, one whose last shard ran out at 3 (no length known)."""
    ev = evidence({0: [loader(), training_pass(0)], 1: [loader(), training_pass(0)],
                   2: [loader(), training_pass(0, len=None, batches=3, exhausted=True)]})
    got = judge(data.UNEVEN_INPUTS, ev)
    assert got.status == Status.FOUND
    assert ("the DataLoader made at train.py:20 gives rank 0 4 batches, rank 1 4 batches, "
            "rank 2 3 batches per epoch: at batch 4, ranks 0, 1 run a backward") in got.why
    assert got.problems[0].evidence == {"batches_per_rank": {0: 4, 1: 4, 2: 3}}


def stream(items_by_rank: dict, batches_by_rank: dict):
    """Per rank: a stream's loader, a training pass the doctor capped, and the doctor's count
    of the stream's whole epoch."""
    return evidence({r: [loader(**STREAM), training_pass(0, len=None),
                         IterableCount(loader=0, items=items_by_rank[r],
                                       batches=batches_by_rank[r], complete=True,
                                       same_start=True)]
                     for r in items_by_rank})


def test_uneven_inputs_found_in_a_stream_counted_to_its_end():
    got = judge(data.UNEVEN_INPUTS, stream({0: 33, 1: 31}, {0: 5, 1: 4}))
    assert got.status == Status.FOUND
    assert ("gives rank 0 5 batches, rank 1 4 batches per epoch (its TokenStream, iterated to "
            "its end by the doctor after the script, gave rank 0 33, rank 1 31 items): at "
            "batch 5, rank 0 runs a backward") in got.why
    assert got.problems[0].evidence["items_per_rank"] == {0: 33, 1: 31}


def test_uneven_inputs_passes_a_stream_of_even_epochs():
    got = judge(data.UNEVEN_INPUTS, stream({0: 32, 1: 32}, {0: 4, 1: 4}))
    assert got.status == Status.PASSED
    assert "(an IterableDataset's epoch, counted to its end: 4 batches on each rank)" in got.why


def test_uneven_inputs_passes_equal_lengths():
    got = judge(data.UNEVEN_INPUTS, evidence({r: [loader(), training_pass(0)] for r in (0, 1)}))
    assert got.status == Status.PASSED
    assert got.why == "every rank's training loader has the same number of batches"


def test_uneven_inputs_not_applicable_without_a_length():
    """A stream's pass the doctor cut, and no count of its epoch (a loader with workers)."""
    ev = evidence({r: [loader(**STREAM), training_pass(0, len=None)] for r in (0, 1)})
    got = judge(data.UNEVEN_INPUTS, ev)
    assert got.status == Status.NOT_APPLICABLE
    assert "no training DataLoader with a length" in got.why


def test_uneven_inputs_not_applicable_on_one_rank():
    got = judge(data.UNEVEN_INPUTS, evidence({0: [loader(), training_pass(0)]}))
    assert got.status == Status.NOT_APPLICABLE and got.why == "one rank"
