"""``reference-differs`` (``judges/reference.py``) on a hand-built reference outcome, one test
per branch: the N ranks' records, the one process's (``reference.outcome.Outcome``) and the
comparison of their parameters and learning rates (``reference.compare.Comparison``), made
here as the reference run would leave them, with no process started."""

from __future__ import annotations

import dataclasses

from ddplab.doctor.judging.findings import Status
from ddplab.doctor.judging.judges import accumulation, reference
from ddplab.doctor.records import Printed
from ddplab.doctor.reference.compare import Comparison, TensorDiff
from ddplab.doctor.reference.outcome import Outcome
from judge_records import FILE, earlier_finding, evidence, judge, step

STEPS = (1, 2, 3)
# rank 1's fc.weight after step 2: 0.0456 away from the one process's, 38000 allowances
APART = TensorDiff(step=2, rank=1, name="fc.weight", shape=(4, 8), max_abs=0.0123, rel=0.05,
                   norm=0.0456, allowed=1.2e-6)
PARAMETER = ("after optimizer step 2, rank 1's fc.weight [4, 8] differs from one process's on "
             "the same 16 samples: largest element 0.0123, norm 0.0456 = 0.05 of its path, "
             "3.8e+04 times the float32 allowance 1.2e-06")


def stepped(number: int, loss: float | None = None, under: str = "NllLossBackward0",
            ops=()) -> object:
    """Optimizer step ``number``: one backward of ``loss`` through ``under``, scaled by
    ``ops``."""
    s = step(number, losses=[loss])
    return dataclasses.replace(s, backwards=[dataclasses.replace(
        s.backwards[0], under=under, ops=list(ops))])


def said(text: str, after: int, line: int = 60) -> Printed:
    """``text`` printed at ``line`` after ``after`` optimizer steps."""
    return Printed(file=FILE, line=line, text=text, step=after)


def compared(lr=0.1, own_lr=None, lrs=None, samples=None, **changes) -> Comparison:
    """Two ranks and one process over steps 1 to 3 on 16 samples each, every learning rate
    ``lr`` (the one process's ``own_lr``; ``lrs``: (step, rank) -> LRs that replace those)."""
    samples = samples or {k: 16 for k in STEPS}
    ranks_lr = {(k, r): [lr] for k in STEPS for r in (0, 1)}
    fields = dict(world_size=2, steps=list(STEPS), samples=samples, served=dict(samples),
                  largest_abs=6e-8, lr_own={k: [lr if own_lr is None else own_lr] for k in STEPS},
                  lr_ranks={**ranks_lr, **(lrs or {})},
                  notes={"reference": {"chunked": True}})  # its forward ran in the chunks
    return Comparison(**{**fields, **changes})


def run(comparison: Comparison | None, ranks=None, one=None, skipped=None, outcome=True):
    """The ranks' evidence (``ranks``: rank -> records; a step each of ``STEPS`` by default)
    with its reference outcome (``one``: the one process's records), or none (``outcome``)."""
    ranks = ranks or {r: [stepped(k) for k in STEPS] for r in (0, 1)}
    ev = evidence(ranks)
    if outcome:
        ev.reference = Outcome(comparison=comparison, skipped=skipped,
                               evidence=evidence({0: one or [stepped(k) for k in STEPS]}))
    return ev


def verdict(ev, earlier=()):
    return judge(reference.REFERENCE_DIFFERS, ev, earlier)


def test_not_applicable_without_a_comparison():
    """No reference run (under torchrun); one that was skipped; one with no step; one that
    could not be fed the ranks' samples."""
    cases = {
        "no reference run (a run under torchrun, or none recorded)": run(None, outcome=False),
        "no reference run: the script's data could not be collated":
            run(None, skipped="the script's data could not be collated"),
        "the one-process run took no step that could be compared": run(compared(steps=[])),
        "the one process could not be fed the ranks' samples step for step (step 2: 12 samples "
        "where the 2 ranks trained on 16)": run(compared(served={1: 16, 2: 12, 3: 16})),
    }
    for why, ev in cases.items():
        got = verdict(ev)
        assert (got.status, got.why) == (Status.NOT_APPLICABLE, why)


def test_passes_with_the_agreement_line_and_its_numbers():
    lines = [said("step 1: loss 0.6931, acc 0.50", 1), said("step 2: loss 0.6012, acc 0.75", 2)]
    got = verdict(run(compared(), ranks={0: [*lines], 1: []}, one=lines))
    assert got.status == Status.PASSED
    assert got.why == ("2 ranks and one process on the same 16 samples per step agree at every "
                       "one of 3 steps (largest parameter difference 6e-08; every printed "
                       "number equal (6 in 2 lines))")


def test_passes_with_a_range_of_samples_dropout_off_and_nothing_printed():
    comparison = compared(samples={1: 16, 2: 16, 3: 12}, notes={"run": {"dropout_off": 2}})
    got = verdict(run(comparison))
    assert got.status == Status.PASSED
    assert got.why == ("2 ranks and one process on the same 12 to 16 samples per step agree at "
                       "every one of 3 steps (largest parameter difference 6e-08; no printed "
                       "number to compare); 2 dropout layers off in both runs")


def test_passes_counts_that_differ_by_design():
    """An integer (a count of samples) is a rank's share: not compared as a difference."""
    got = verdict(run(compared(), ranks={0: [said("seen 8 samples", 1)], 1: []},
                      one=[said("seen 16 samples", 1)]))
    assert got.status == Status.PASSED
    assert "every printed number equal (1 in 1 lines)" in got.why


def test_passes_a_learning_rate_chosen_linear_in_the_world_size():
    """The LR x2 on 2 ranks: the one process steps at the ranks' rate; the printed LRs (one
    matched to the recorded rates, one by its words and the factor) are in the ratio."""
    ranks = [said("step 1: lr 0.200", 1), said("step 3: lr 0.1000", 3, line=61)]
    one = [said("step 1: lr 0.100", 1), said("step 3: lr 0.0500", 3, line=61)]
    got = verdict(run(compared(lr=0.2, own_lr=0.1), ranks={0: ranks, 1: []}, one=one))
    assert got.status == Status.PASSED
    assert got.why.endswith("(largest parameter difference 6e-08; every printed number equal "
                            "(4 in 2 lines; 2 learning rates in the ratio chosen)); the learning "
                            "rate follows the world size (x2, linear in the world size: 0.2 on "
                            "2 ranks, 0.1 in one process, which stepped at the ranks' rate)")


def test_passes_a_learning_rate_chosen_as_the_square_root_or_another_factor():
    for lr, named in ((0.1 * 2 ** 0.5, "x1.414, the square root of the world size: 0.141421"),
                      (0.3, "x3: 0.3")):
        got = verdict(run(compared(lr=lr, own_lr=0.1)))
        assert got.status == Status.PASSED
        assert got.why.endswith(f"; the learning rate follows the world size ({named} on 2 "
                                "ranks, 0.1 in one process, which stepped at the ranks' rate)")


def test_a_learning_rate_of_0_in_the_one_process_is_no_chosen_factor():
    got = verdict(run(compared(lr=0.1, own_lr=0.0)))
    assert got.status == Status.PASSED and "follows the world size" not in got.why


def test_found_a_parameter_multiplied_by_the_world_size_through_the_loss():
    ranks = {r: [stepped(k, ops=["x 2"]) for k in STEPS] for r in (0, 1)}
    update = {"ratio": 2.0, "cosine": 1.0}
    got = verdict(run(compared(first=APART, update=update), ranks=ranks))
    assert got.status == Status.FOUND and got.problems[0].kind is None  # the check's: error
    assert got.why == (f"{PARAMETER}. rank 1's update at this step is 2 times the one "
                       "process's (cosine 1.000); the loss is multiplied by the world size (x 2 "
                       "under backward at train.py:44)")
    problem = got.problems[0]
    assert (problem.file, problem.line) == (FILE, 45)  # rank 1's step 2
    assert problem.evidence["over"] == APART.norm / APART.allowed
    assert problem.evidence["shape"] == [4, 8] and problem.evidence["update"] == update


def test_found_gradients_n_times_ddps_average():
    """x N with no factor under backward: gradients summed by hand, not divided."""
    got = verdict(run(compared(first=APART, update={"ratio": 2.0004, "cosine": 0.9999})))
    assert got.status == Status.FOUND
    assert got.why.endswith("rank 1's update at this step is 2 times the one process's (cosine "
                            "1.000); the gradients are 2 times what DDP's average gives: summed "
                            "over the ranks (an all-reduce of the gradients by hand, not "
                            "divided), or a loss multiplied by the world size")


def test_found_x_n_where_the_rank_recorded_no_backward():
    ranks = {0: [stepped(k) for k in STEPS], 1: []}
    got = verdict(run(compared(first=APART, update={"ratio": 2.0, "cosine": 1.0}), ranks=ranks))
    assert got.status == Status.FOUND and "the gradients are 2 times" in got.why
    assert (got.problems[0].file, got.problems[0].line) == (None, None)


def test_found_a_sum_loss_one_over_n_as_far_is_chosen():
    """A loss summed over each rank's batch: each step moves 1/N as far, an advisory."""
    ranks = {r: [stepped(k, under="SumBackward0") for k in STEPS] for r in (0, 1)}
    got = verdict(run(compared(first=APART, update={"ratio": 0.5, "cosine": 1.0}), ranks=ranks))
    assert got.status == Status.FOUND and got.problems[0].kind == "advisory"
    assert got.why == (f"{PARAMETER}; the loss is a sum over each rank's batch (SumBackward0 "
                       "under backward at train.py:44): DDP averages the ranks' gradients, so "
                       "each step moves 1/2 as far as one process summing over the same samples")


def test_found_one_over_n_as_far_with_a_mean_loss_is_an_error():
    got = verdict(run(compared(first=APART, update={"ratio": 0.5, "cosine": 1.0})))
    assert got.status == Status.FOUND and got.problems[0].kind is None
    assert got.why == (f"{PARAMETER}. rank 1's update at this step is 0.5 times the one "
                       "process's (cosine 1.000)")


def test_found_one_over_n_as_far_where_rank_0_took_no_backward():
    ranks = {0: [], 1: [stepped(k, under="SumBackward0") for k in STEPS]}
    got = verdict(run(compared(first=APART, update={"ratio": 0.5, "cosine": 1.0}), ranks=ranks))
    assert got.status == Status.FOUND and got.problems[0].kind is None


def test_found_an_update_that_points_elsewhere():
    got = verdict(run(compared(first=APART, update={"ratio": 1.1, "cosine": 0.62})))
    assert got.status == Status.FOUND
    assert got.why == (f"{PARAMETER}. rank 1's update at this step is 1.1 times the one "
                       "process's (cosine 0.620); the update points elsewhere: the rank "
                       "computed its gradients on other samples or through another model (a "
                       "forward that bypasses DDP, replicas that differ)")


def test_found_a_difference_with_no_update_to_compare_and_nothing_above():
    got = verdict(run(compared(first=APART)))
    assert got.status == Status.FOUND and got.why == PARAMETER


def test_found_the_ranks_stepping_at_different_learning_rates():
    """Rank 1's LR 1 % off from step 1: the error names the LRs, the parameters its proof."""
    lrs = {(1, 1): [0.0101], (2, 1): [0.0101]}
    first = dataclasses.replace(APART, step=1)
    got = verdict(run(compared(lr=0.01, lrs=lrs, first=first)))
    assert got.status == Status.FOUND and len(got.problems) == 1
    assert got.why == ("from optimizer step 1 the ranks step at different learning rates: rank 1 "
                       "at 0.0101, rank 0 at 0.01 (parameter group 0); one process steps at one "
                       "rate. A scheduler or an LR change that runs on some ranks only is the "
                       "likely cause; " + PARAMETER.replace("step 2", "step 1"))
    assert got.problems[0].evidence == {"step": 1, "rank": 1, "group": 0, "lr": 0.0101,
                                        "rank0_lr": 0.01, "parameter": "fc.weight",
                                        "over": APART.over, "max_abs": 0.0123,
                                        "parameter_step": 1}
    assert (got.problems[0].file, got.problems[0].line) == (FILE, 45)


def test_found_a_learning_rate_of_the_second_group_alone_with_no_step_recorded():
    """Group 1 differs; the parameters agree; no rank recorded a step (no line to point at);
    a printed difference after it is not reported twice."""
    lrs = {(2, 1): [0.01, 0.002], (2, 0): [0.01, 0.001]}
    got = verdict(run(compared(lr=0.01, lrs=lrs), ranks={0: [said("loss 0.51", 1)], 1: []},
                      one=[said("loss 0.25", 1)]))
    assert got.status == Status.FOUND and len(got.problems) == 1
    assert got.why.startswith("from optimizer step 2 the ranks step at different learning rates: "
                              "rank 1 at 0.002, rank 0 at 0.001 (parameter group 1)")
    assert (got.problems[0].file, got.problems[0].line) == (None, None)


def test_passes_a_rank_whose_rank_0_learning_rate_is_missing():
    got = verdict(run(compared(lr=0.01, lrs={(4, 1): [0.02]})))
    assert got.status == Status.PASSED


def printed_apart(ranks_text: str, one_text: str):
    return run(compared(), ranks={0: [said(ranks_text, 2)], 1: []}, one=[said(one_text, 2)])


def test_found_a_printed_number_with_the_words_for_its_ratio():
    cases = {
        ("loss 0.3000", "loss 0.6000"): "ratio 1/2: one rank's share of a sum over all the data, "
                                        "or a mean divided by the world size once too often",
        ("loss 1.2000", "loss 0.6000"): "ratio 2: a sum over the 2 ranks, not divided by the "
                                        "world size",
        ("loss 0.7000", "loss 0.6000"): "ratio 1.167: not a multiple of the world size; computed "
                                        "on other samples",
        ("loss 0.7000", "loss 0.0000"): "no ratio: the one process printed 0",
    }
    for (mine, theirs), words in cases.items():
        got = verdict(printed_apart(mine, theirs))
        factor = "multiple" not in words and "no ratio" not in words  # N or 1/N: the proof
        assert got.status == Status.FOUND
        assert got.problems[0].kind == (None if factor else "advisory")
        assert got.why == (f"after optimizer step 2, rank 0 printed {mine!r} where one process "
                           f"on the same samples printed {theirs!r}: {float(mine[5:]):.6g} "
                           f"against {float(theirs[5:]):.6g}, {words}"
                           + ("" if factor else " (or a number of rank 0's own samples: "
                              "advice, not proof)"))
        assert (got.problems[0].file, got.problems[0].line) == (FILE, 60)


def test_found_rank_0_printing_its_own_loss_as_an_advisory():
    """Each run prints the loss it gave to backward: rank 0's on its half of the samples."""
    ranks = {0: [stepped(1, loss=0.5), said("loss 0.5000", 1), stepped(2, loss=0.4),
                 said("loss 0.4000", 2)], 1: []}
    one = [stepped(1, loss=0.45), said("loss 0.4500", 1), stepped(2, loss=0.41),
           said("loss 0.4100", 2)]
    got = verdict(run(compared(), ranks=ranks, one=one))
    assert got.status == Status.FOUND and got.problems[0].kind == "advisory"
    assert got.why == ("rank 0 prints its own loss, on its 1/2 of each step's samples, where one "
                       "process prints the whole batch's ('loss 0.5000' against 'loss 0.4500' "
                       "after step 1; 2 such numbers)")
    assert got.problems[0].evidence == {"lines": 2} and got.problems[0].line == 60


def test_a_printed_number_the_chosen_factor_does_not_explain_is_found():
    """The LR is chosen x2, but the printed line is no learning rate in that ratio."""
    ev = run(compared(lr=0.2, own_lr=0.1), ranks={0: [said("loss 0.900", 2)], 1: []},
             one=[said("loss 0.300", 2)])
    got = verdict(ev)
    assert got.status == Status.FOUND and "ratio 3: not a multiple" in got.why


def test_what_the_checks_above_found_is_named_and_makes_the_difference_an_advisory():
    """An earlier error explains the difference: named in the cause, the finding an advisory;
    an earlier waste is named but explains nothing."""
    unsynced = earlier_finding(accumulation.ACCUMULATION_UNSYNCED_STEP)
    waste = earlier_finding(accumulation.ACCUMULATION_NO_SYNC)
    got = verdict(run(compared(first=APART)), [waste, unsynced])
    assert got.status == Status.FOUND and got.problems[0].kind == "advisory"
    assert got.why == (f"{PARAMETER}. the checks above found accumulation-no-sync, "
                       "accumulation-unsynced-step")
    got = verdict(run(compared(first=APART)), [waste])
    assert got.problems[0].kind is None
    assert got.why == f"{PARAMETER}. the checks above found accumulation-no-sync"


def test_a_printed_difference_the_checks_above_explain_says_so():
    got = verdict(printed_apart("loss 1.2000", "loss 0.6000"),
                  [earlier_finding(accumulation.ACCUMULATION_UNSYNCED_STEP)])
    assert got.status == Status.FOUND and got.problems[0].kind == "advisory"
    assert got.why.endswith("not divided by the world size. The checks above found "
                            "accumulation-unsynced-step")


def test_a_number_is_shown_as_its_line_shows_it():
    assert reference._shown("loss 0.50", 0.5) == "0.50"
    assert reference._shown("loss 0.50", 0.25) == "0.25"  # not in the line: its repr


def test_a_parameter_difference_without_the_chunked_forward_is_advice():
    """The one process took a branch without DDP (``if world_size > 1: model = DDP(...)``):
    BatchNorm there saw the whole batch, so the difference proves nothing."""
    got = verdict(run(compared(first=APART, update={"ratio": 1.0, "cosine": 0.97},
                               notes={"reference": {}})))
    assert got.status == Status.FOUND and got.problems[0].kind == "advisory"
    assert "did not run its forward through DDP" in got.problems[0].message
