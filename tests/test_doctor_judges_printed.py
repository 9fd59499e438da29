"""The judges of what a rank prints (``judges/printed.py``) on hand-built records, one test per
branch: ``logged-sum-not-divided``, ``mean-over-global-count``."""

from __future__ import annotations

from ddplab.doctor.judging.findings import Status
from ddplab.doctor.judging.judges import printed
from ddplab.doctor.records import Printed
from judge_records import FILE, collective, evidence, judge, loader, step, training_pass


def said(text: str, line: int = 60) -> Printed:
    return Printed(file=FILE, line=line, text=text)


def logged(text: str | None, values=(0.4123, 0.3877), total=0.8, ranks=(0, 1), **changes):
    """Every rank all-reduces its value (SUM) to ``total``; rank 0 then prints ``text``."""
    return evidence({r: [collective(line=58, before=[values[r]], after=[total], **changes),
                         *([said(text)] if text and r == 0 else [])] for r in ranks})


def test_logged_sum_not_divided_found_where_the_sum_is_printed():
    got = judge(printed.LOGGED_SUM_NOT_DIVIDED, logged("step 4: loss 0.80"))
    assert got.status == Status.FOUND
    assert got.why == ("rank 0 prints \"step 4: loss 0.80\" at train.py:60: 0.8 is the "
                       "all_reduce(SUM) at train.py:58 of the 2 ranks' values (rank 0: 0.4123, "
                       "rank 1: 0.3877), not their mean 0.4: the printed number grows with the "
                       "world size")
    assert got.problems[0].line == 60


def test_logged_sum_not_divided_passes_what_is_no_undivided_mean():
    """The mean printed; a line that shows no second decimal; whole numbers (counts) summed;
    nothing printed after the reduction; an AVG."""
    for ev in (logged("step 4: loss 0.40"), logged("step 4: loss 0.8"),
               logged("correct 41", values=(21, 20), total=41.0), logged(None),
               logged("step 4: loss 0.40", reduce="AVG", total=0.4)):
        got = judge(printed.LOGGED_SUM_NOT_DIVIDED, ev)
        assert got.status == Status.PASSED, ev.kept
        assert got.why == "no printed number is an undivided SUM of the ranks' means"


def test_logged_sum_not_divided_not_applicable_without_reductions_alike():
    ev = evidence({0: [collective(before=[0.41], after=[0.8]), said("loss 0.80")], 1: []})
    got = judge(printed.LOGGED_SUM_NOT_DIVIDED, ev)
    assert got.status == Status.NOT_APPLICABLE and "no all-reduce the ranks called" in got.why


def test_logged_sum_not_divided_not_applicable_on_one_rank():
    got = judge(printed.LOGGED_SUM_NOT_DIVIDED, logged("loss 0.80", ranks=(0,)))
    assert got.status == Status.NOT_APPLICABLE and got.why == "one rank"


def epoch(text: str | None, losses=(0.5, 0.5, 0.5, 0.5), sizes=(8, 8, 8, 8), size=64,
          ranks=(0, 1), pass_changes=None, **step_changes):
    """Every rank: its loader's shard of ``size`` samples, one whole training pass of a step
    per batch (its loss and size), then ``text`` printed."""
    seen = [loader(dataset_len=size),
            training_pass(0, capped=False, samples=sum(sizes), **(pass_changes or {})),
            *(step(n, batch=b, losses=[v], **step_changes)
              for n, (v, b) in enumerate(zip(losses, sizes), 1)),
            *([said(text, line=62)] if text else [])]
    return evidence({r: seen for r in ranks})


def test_mean_over_global_count_found_divided_by_the_datasets_length():
    got = judge(printed.MEAN_OVER_GLOBAL_COUNT, epoch("epoch 0: loss 0.2500"))
    assert got.status == Status.FOUND
    assert got.why == ("rank 0 prints \"epoch 0: loss 0.2500\" at train.py:62: 0.25 is the sum "
                       "over its 32 samples / len(dataset) 64, but the rank trained on 32 of the "
                       "64 samples (its shard): its own mean loss is 0.5, so the printed number "
                       "is about 1/2 of it")
    assert got.problems[0].line == 62


def test_mean_over_global_count_found_divided_by_the_datasets_batches():
    """60 samples in batches of 8: 7 or 8 batches in the whole dataset, 4 on this rank."""
    ev = epoch("epoch 0: loss 0.2571", losses=(0.6, 0.5, 0.4, 0.3), sizes=(8, 8, 8, 6), size=60)
    got = judge(printed.MEAN_OVER_GLOBAL_COUNT, ev)
    assert got.status == Status.FOUND
    assert ("0.2571 is the sum of its 4 batch means / 7 batches of the whole dataset, but the "
            "rank trained on 30 of the 60 samples (its shard): its own mean loss is 0.46") \
        in got.why


def test_mean_over_global_count_reads_each_epochs_own_steps():
    """Epoch 0 prints the sum over the dataset's count; epoch 1 its own mean: each pass is
    told from its own steps, up to the next pass of its loader."""
    first = epoch("epoch 0: loss 0.2500").kept[0]
    seen = [*first["loader"], first["pass"][0], *first["step"], *first["printed"],
            training_pass(1, capped=False),
            *(step(n, losses=[0.4]) for n in range(5, 9)), said("epoch 1: loss 0.4000")]
    got = judge(printed.MEAN_OVER_GLOBAL_COUNT, evidence({0: seen, 1: seen}))
    assert got.status == Status.FOUND and got.why.startswith("rank 0 prints \"epoch 0: loss")


def test_mean_over_global_count_passes_the_ranks_own_mean():
    for text in ("epoch 0: loss 0.5000", "epoch 0: loss 0.3100"):
        got = judge(printed.MEAN_OVER_GLOBAL_COUNT, epoch(text))
        assert got.status == Status.PASSED
        assert got.why == ("no printed number is a rank's loss sum divided by the whole "
                           "dataset's count")


def test_mean_over_global_count_not_applicable_where_it_cannot_tell():
    """Nothing printed; no shard (every rank all 64 samples); a pass the doctor cut; two
    backwards a step; a loss that is not one number; one step a pass."""
    for ev in (epoch(None), epoch("loss 0.2500", sizes=(16, 16, 16, 16)),
               epoch("loss 0.2500", pass_changes={"len": 8}),
               epoch("loss 0.2500", factors=(0.5, 0.5)),
               epoch("loss 0.2500", losses=(0.5, None, 0.5, 0.5)),
               epoch("loss 0.2500", losses=(0.5,), sizes=(8,), pass_changes={"len": 1,
                                                                               "batches": 1})):
        got = judge(printed.MEAN_OVER_GLOBAL_COUNT, ev)
        assert got.status == Status.NOT_APPLICABLE, ev.kept
        assert got.why.startswith("no whole training pass whose losses and printed lines")


def test_mean_over_global_count_not_applicable_on_one_rank():
    got = judge(printed.MEAN_OVER_GLOBAL_COUNT, epoch("loss 0.2500", ranks=(0,)))
    assert got.status == Status.NOT_APPLICABLE and got.why == "one rank"
