"""The accumulation judges (``judges/accumulation.py``) on hand-built records, one test per
branch: ``accumulation-no-sync``, ``accumulation-unsynced-step``,
``accumulation-loss-not-divided``."""

from __future__ import annotations

from ddplab.doctor.judging.findings import Status
from ddplab.doctor.judging.judges import accumulation
from judge_records import ddp, evidence, judge, step

QUARTERS = (0.25,) * 4  # 4 micro-steps, each loss divided by 4


def both(*seen, **by_rank):
    """Both ranks saw ``seen`` (or, by rank, ``by_rank["r0"]``, ``by_rank["r1"]``)."""
    return evidence({0: list(by_rank.get("r0", seen)), 1: list(by_rank.get("r1", seen))})


def test_accumulation_no_sync_found_where_every_micro_step_all_reduces():
    got = judge(accumulation.ACCUMULATION_NO_SYNC,
                both(ddp(), step(1, micro=(True,) * 4, factors=QUARTERS)))
    assert got.status == Status.FOUND
    assert got.why == ("4 micro-steps per optimizer step (step 1 at train.py:45), and DDP "
                       "all-reduced the gradients (0.00318 MiB) after each of them: only the last "
                       "of the 4 all-reduces is needed, the 3 before it move data for nothing")
    assert got.problems[0].line == 44  # the first backward


def test_accumulation_no_sync_passes_micro_steps_under_no_sync():
    got = judge(accumulation.ACCUMULATION_NO_SYNC,
                both(ddp(), step(1, micro=(False, False, False, True), factors=QUARTERS)))
    assert got.status == Status.PASSED and "run under no_sync" in got.why


def test_accumulation_no_sync_not_applicable_without_accumulation():
    for seen in ([ddp(), step(1)], [step(1, micro=(), factors=QUARTERS)]):  # no DDP forward
        got = judge(accumulation.ACCUMULATION_NO_SYNC, both(*seen))
        assert got.status == Status.NOT_APPLICABLE and "accumulates several" in got.why


def gradients(weight: str, norm: float) -> dict:
    """A step's gradient summaries, name -> [digest, sum, norm]."""
    return {"fc.weight": [weight, 0.031, norm], "fc.bias": ["a0c4", 0.002, 0.012]}


def test_accumulation_unsynced_step_found_with_the_gradients_that_differ():
    unsynced = dict(micro=(False,) * 4, factors=QUARTERS)
    got = judge(accumulation.ACCUMULATION_UNSYNCED_STEP, both(
        r0=[step(1, grads=gradients("9e1f", 0.5), **unsynced)],
        r1=[step(1, grads=gradients("44b2", 0.7), **unsynced)]))
    assert got.status == Status.FOUND
    assert got.why.startswith("optimizer step 1 at train.py:45 follows 4 micro-steps none of "
                              "which synchronised the gradients")
    assert got.why.endswith("drift apart; 1 of the gradients differ across ranks at that step "
                            "(fc.weight: norm 0.5 on rank 0, 0.7 on rank 1)")


def test_accumulation_unsynced_step_found_with_equal_gradients_says_no_more():
    same = step(1, micro=(False, False), factors=(0.5, 0.5), grads=gradients("9e1f", 0.5))
    got = judge(accumulation.ACCUMULATION_UNSYNCED_STEP, both(same))
    assert got.status == Status.FOUND and "follows 2 micro-steps" in got.why
    assert got.why.endswith("drift apart") and got.problems[0].evidence["differing_gradients"] \
        == []


def test_accumulation_unsynced_step_found_after_one_micro_step():
    got = judge(accumulation.ACCUMULATION_UNSYNCED_STEP, both(step(1), step(2, micro=(False,))))
    assert got.status == Status.FOUND
    assert got.why.startswith("optimizer step 2 at train.py:45 follows 1 micro-step none of")


def test_accumulation_unsynced_step_passes_a_last_micro_step_that_syncs():
    got = judge(accumulation.ACCUMULATION_UNSYNCED_STEP,
                both(step(1, micro=(False, True), factors=(0.5, 0.5))))
    assert got.status == Status.PASSED and "synchronised" in got.why


def test_accumulation_unsynced_step_not_applicable_without_a_ddp_forward():
    got = judge(accumulation.ACCUMULATION_UNSYNCED_STEP, both(step(1, micro=())))
    assert got.status == Status.NOT_APPLICABLE and "no optimizer step after a DDP" in got.why


def divided(*factors):
    return judge(accumulation.ACCUMULATION_LOSS_NOT_DIVIDED,
                 both(step(1, micro=(False,) * (len(factors) - 1) + (True,), factors=factors)))


def test_accumulation_loss_not_divided_found_where_no_micro_step_divides():
    got = divided(1.0, 1.0, 1.0, 1.0)
    assert got.status == Status.FOUND
    assert got.why.startswith("4 micro-steps per optimizer step (step 1), and the loss given to "
                              "backward at train.py:44 is the loss function's output itself, "
                              "not divided by 4: the step's gradient weighs that micro-batch 4x "
                              "(the step's gradient is 4x the mean")
    assert got.problems[0].evidence["divided_micro_steps"] == []


def test_accumulation_loss_not_divided_found_where_one_micro_step_does_not():
    got = divided(0.25, 0.25, 0.25, 0.5)
    assert got.status == Status.FOUND
    assert ("is the loss function's output / 2, not divided by 4; micro-steps 1, 2, 3 divide by "
            "4, micro-step 4 does not: the step's gradient weighs that micro-batch 2x (the "
            "step's gradient is 1.25x") in got.why


def test_accumulation_loss_not_divided_found_of_two_where_one_divides():
    got = divided(0.5, 1.0)
    assert got.status == Status.FOUND
    assert "; micro-step 1 divides by 2, micro-step 2 does not" in got.why
    assert "(the step's gradient is 1.5x" in got.why


def test_accumulation_loss_not_divided_found_where_a_loss_was_not_one_tensor():
    """Micro-step 2's factor is unknown: the scale is told from the undivided one alone."""
    got = divided(1.0, None, 1.0, 1.0)
    assert got.status == Status.FOUND and "(the step's gradient is 4x" in got.why
    assert got.problems[0].evidence["factors"] == [1.0, None, 1.0, 1.0]


def test_accumulation_loss_not_divided_passes_divided_losses_and_unknown_ones():
    for factors in (QUARTERS, (None, None)):
        got = divided(*factors)
        assert got.status == Status.PASSED and "divided by the number of" in got.why


def test_accumulation_loss_not_divided_not_applicable_without_accumulation():
    got = judge(accumulation.ACCUMULATION_LOSS_NOT_DIVIDED, both(step(1), step(2)))
    assert got.status == Status.NOT_APPLICABLE and "several backwards" in got.why
