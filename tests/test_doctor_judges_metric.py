"""``metric-mean-of-means`` (``judges/metric.py``) on hand-built records, one test per branch:
an evaluation sampler's padding (seen in a gathered result, in a reduced count, or not seen),
and one mean per rank averaged over unequal shards."""

from __future__ import annotations

from ddplab.doctor.judging.findings import Status
from ddplab.doctor.judging.judges import metric
from ddplab.doctor.records import GatheredUse
from judge_records import FILE, collective, evidence, judge, loader, sampler_order, training_pass

PASSED = ("no padded evaluation shard is reduced, and no per-rank mean over unequal shards is "
          "averaged")


def padded(after=None, size=45, ranks=2, then=None, **order):
    """Every rank: an evaluation loader over ``size`` samples, its DistributedSampler's order
    (padded to a multiple of ``ranks``), the whole pass, then ``then``: by default an
    all-reduce of the counts (``after``: what it gave)."""
    total = -(-size // ranks) * ranks
    counts = collective(line=87, dtype="int64", numel=2, before=[12, 23], after=after)
    seen = [loader(index=1, line=57, dataset_len=size, sampler_len=total // ranks),
            sampler_order(0, "9341c60f", sampler=1, loader=1, shuffle=False, dataset_len=size,
                          total_size=total, num_replicas=ranks, count=total // ranks,
                          **order),
            training_pass(0, loader=1, line=81, len=3, batches=3, samples=total // ranks,
                          training=False, capped=False, exhausted=True),
            *(then or [counts])]
    return evidence({r: seen for r in range(ranks)})


def uses(**changes) -> list:
    """The all_gather of the predictions, and the first use of what it brought."""
    return [collective("all_gather", line=85, reduce=None, numel=23), gathered(**changes)]


def gathered(**changes) -> GatheredUse:
    fields = dict(file=FILE, line=86, how="torch.cat", gather_file=FILE, gather_line=85,
                  loader=1, pass_number=0, dataset_len=45, samples=45, distinct=44,
                  repeated=[0], repeats={"0": 2}, missing=[44])
    return GatheredUse(**{**fields, **changes})


def test_metric_found_where_a_reduced_count_holds_the_padding():
    got = judge(metric.METRIC_MEAN_OF_MEANS, padded(after=[25, 46]))
    assert got.status == Status.FOUND and got.problems[0].kind is None  # the check's: error
    assert got.why == ("the evaluation DistributedSampler of the DataLoader made at train.py:57 "
                       "splits 45 samples over 2 ranks and pads them to 46: 1 sample is "
                       "evaluated twice, and the all_reduce at train.py:87 counts 46 samples "
                       "where the dataset has 45")
    assert got.problems[0].line == 81  # the evaluation's loop


def test_metric_advises_where_it_cannot_see_the_repeat_reach_the_metric():
    got = judge(metric.METRIC_MEAN_OF_MEANS, padded(after=[25, 45], ranks=4))
    assert got.status == Status.FOUND and got.problems[0].kind == "advisory"
    assert got.why.startswith("the evaluation DistributedSampler of the DataLoader made at "
                              "train.py:57 splits 45 samples over 4 ranks and pads them to 48: "
                              "3 samples are evaluated twice; the doctor could not see whether "
                              "the repeat reaches the metric reduced by the all_reduce at "
                              "train.py:87")


def test_metric_found_where_a_gathered_result_holds_a_sample_twice():
    got = judge(metric.METRIC_MEAN_OF_MEANS, padded(then=uses()))
    assert got.status == Status.FOUND
    assert ("pads 45 samples to 46; the predictions gathered at train.py:85 and used at "
            "train.py:86 (torch.cat) hold 45 samples: sample 0 2 times, and never sample 44: "
            "concatenating the ranks' rows") in got.why
    assert got.problems[0].line == 86 and "torch.stack(gathered, dim=1)" in got.problems[0].fix


def test_metric_found_in_a_gathered_result_that_misses_nothing():
    got = judge(metric.METRIC_MEAN_OF_MEANS, padded(then=uses(samples=46, distinct=45, missing=[])))
    assert got.status == Status.FOUND
    assert "hold 46 samples: sample 0 2 times: concatenating" in got.why


def test_metric_passes_a_gathered_result_cut_to_the_dataset():
    cut = uses(distinct=45, repeated=[], repeats={}, missing=[])
    got = judge(metric.METRIC_MEAN_OF_MEANS, padded(then=cut))
    assert got.status == Status.PASSED
    assert got.why == ("the predictions gathered at train.py:85 and used at train.py:86 hold "
                       "each of the 45 samples once: the padding is cut off")


def test_metric_passes_an_evaluation_sampler_that_does_not_pad():
    """drop_last, a world size that divides the dataset, or nothing reduced after it."""
    barrier = collective("barrier", line=87, reduce=None, numel=None)
    for ev in (padded(after=[25, 46], drop_last=True), padded(after=[24, 44], size=44),
               padded(then=[barrier])):
        got = judge(metric.METRIC_MEAN_OF_MEANS, ev)
        assert got.status == Status.PASSED and got.why == PASSED


def evaluation(samples: int):
    """A whole evaluation pass (no backward) over a rank's own, unpadded shard."""
    return training_pass(0, loader=1, training=False, exhausted=True, samples=samples)


def means(values: dict, samples: dict, neighbour=None, reduce="AVG"):
    """Per rank: its evaluation pass, then an all-reduce of its mean (``values[rank]``) over
    ``samples[rank]`` samples, and ``neighbour`` after it."""
    return evidence({r: [evaluation(samples[r]),
                         collective(line=84, reduce=reduce, before=[v], eval_samples=samples[r]),
                         *([neighbour] if neighbour else [])]
                     for r, v in values.items()})


HF_METRIC = ({0: 0.4761904776096344, 1: 0.4000000059604645}, {0: 21, 1: 20})


def test_metric_found_where_one_mean_per_rank_is_averaged():
    got = judge(metric.METRIC_MEAN_OF_MEANS, means(*HF_METRIC))
    assert got.status == Status.FOUND
    assert got.why == ("all_reduce(AVG) at train.py:84 combines one mean per rank (rank 0: "
                       "0.4762 over 21 samples, rank 1: 0.4 over 20 samples): the mean of the "
                       "ranks' means is 0.4381, the mean over all 41 samples 0.439: ranks with "
                       "fewer samples weigh more")
    assert got.problems[0].line == 84


def test_metric_passes_means_reduced_beside_their_counts():
    counts = collective(line=85, dtype="int64", before=[21], numel=1)
    got = judge(metric.METRIC_MEAN_OF_MEANS, means(*HF_METRIC, neighbour=counts))
    assert got.status == Status.PASSED and got.why == PASSED
    both = collective(line=85, numel=2, before=[10.0, 21.0])  # sums and counts in one tensor
    assert judge(metric.METRIC_MEAN_OF_MEANS, means(*HF_METRIC, neighbour=both)).why == PASSED
    values, samples = HF_METRIC  # the counts reduced before the means
    first = evidence({r: [evaluation(samples[r]),
                          collective(line=83, dtype="int64", before=[samples[r]]),
                          collective(line=84, reduce="AVG", before=[values[r]],
                                     eval_samples=samples[r])] for r in values})
    assert judge(metric.METRIC_MEAN_OF_MEANS, first).why == PASSED


def test_metric_passes_what_is_no_mean_over_unequal_shards():
    """Equal shards, whole numbers (counts), a MAX, or ranks that reduced differently often."""
    alone = evidence({0: [evaluation(21), collective(line=84, before=[0.47], eval_samples=21)],
                      1: [evaluation(20)]})
    for ev in (means({0: 0.47, 1: 0.4}, {0: 21, 1: 21}), means({0: 10.0, 1: 8.0}, {0: 21, 1: 20}),
               means(*HF_METRIC, reduce="MAX"), alone):
        got = judge(metric.METRIC_MEAN_OF_MEANS, ev)
        assert got.status == Status.PASSED and got.why == PASSED


def test_metric_not_applicable_without_a_whole_evaluation_pass():
    got = judge(metric.METRIC_MEAN_OF_MEANS, evidence({0: [training_pass(0)],
                                                       1: [training_pass(0)]}))
    assert got.status == Status.NOT_APPLICABLE and "no evaluation pass" in got.why
