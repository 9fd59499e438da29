"""``schedule-length`` (``judges/schedules.py``) on hand-built records, one test per branch: a
learning-rate schedule sized from the whole dataset while each rank walks its shard's steps."""

from __future__ import annotations

from ddplab.doctor.judging.findings import Status
from ddplab.doctor.judging.judges import schedules
from ddplab.doctor.messages import Done
from ddplab.doctor.records import Outcome, Schedule
from judge_records import FILE, evidence, judge, loader, step, training_pass

TOTAL_STEPS = dict(type="OneCycleLR", length=24, length_name="total_steps", epochs=None,
                   steps_per_epoch=None)


def walked(batches=None, micro=1, outcome=Outcome.FINISHED, stepped=None, loaders=1,
           sized=True, batch_size=8, passes=2, iterations=3, **schedule):
    """Every rank: a loader (``iterations`` iter() calls, the doctor's ended ones included),
    its scheduler (``schedule``), and ``passes`` training passes of ``batches[rank]`` batches,
    an optimizer step every ``micro`` of them, each followed by the scheduler's step
    (``sized``: the loader has a length; ``batch_size`` None: it was given a batch sampler)."""
    batches = batches or {0: 4, 1: 4}
    by_rank = {}
    for rank, per_pass in batches.items():
        steps = passes * per_pass // micro
        made = Schedule(file=FILE, line=44, index=0, optimizer=0, optimizer_steps_at_start=0,
                        steps=steps if stepped is None else stepped, optimizer_steps=steps,
                        **{**TOTAL_STEPS, **schedule})
        seen = [loader(iterations=iterations, batch_size=batch_size),
                *([loader(index=1)] if loaders > 1 else []), *([made] if made.length else [])]
        for number in range(passes):
            seen.append(training_pass(number, len=per_pass if sized else None,
                                      batches=per_pass))
            seen += [step(n, micro=(True,) * micro, factors=(1 / micro,) * micro)
                     for n in range(1 + number * per_pass // micro,
                                    1 + (number + 1) * per_pass // micro)]
        if loaders > 1:
            seen.append(training_pass(0, loader=1))
        by_rank[rank] = seen
    return evidence(by_rank, outcomes={r: Done(outcome, steps=8) for r in batches})


def test_schedule_length_found_sized_from_the_dataset_for_the_epochs_the_script_ran():
    got = judge(schedules.SCHEDULE_LENGTH, walked())
    assert got.status == Status.FOUND
    assert got.why == ("the OneCycleLR made at train.py:44 is sized for 24 steps (total_steps=24): "
                       "3 epochs of the whole dataset (64 samples / batch_size 8 = 8 steps each), "
                       "but each rank's loader gives 4 batches per epoch (its share of the "
                       "dataset), so the 3 epochs the script ran walk 12 of its 24 steps (0.5 of "
                       "the schedule): the learning rate never reaches the end of its schedule")
    assert got.problems[0].line == 44 and got.problems[0].evidence["epochs_counted"]


def test_schedule_length_counts_the_epochs_the_doctor_ended():
    """After the doctor's last step the training loader's passes end at once (one batch, not
    trained on): they are still the script's epochs."""
    ev = walked()
    for rank in (0, 1):
        ev.kept[rank]["pass"].append(training_pass(2, batches=1, training=False, ended=True))
    got = judge(schedules.SCHEDULE_LENGTH, ev)
    assert got.status == Status.FOUND and "so the 3 epochs the script ran walk 12" in got.why


def test_schedule_length_found_from_the_epochs_and_steps_per_epoch_it_was_given():
    got = judge(schedules.SCHEDULE_LENGTH, walked(epochs=3, steps_per_epoch=8))
    assert got.status == Status.FOUND
    assert "is sized for 24 steps (steps_per_epoch=8 x epochs=3)" in got.why
    assert "so the 3 epochs walk 12 of its 24 steps" in got.why


def test_schedule_length_found_with_each_ranks_batches_and_micro_steps():
    got = judge(schedules.SCHEDULE_LENGTH, walked({0: 4, 1: 2}, micro=2, length=12))
    assert got.status == Status.FOUND
    assert ("(64 samples / batch_size 8 / 2 micro-steps = 4 steps each), but the ranks' loaders "
            "give rank 0 4, rank 1 2 batches per epoch") in got.why
    assert got.problems[0].evidence["walked"] == {0: 6.0, 1: 3.0}


def test_schedule_length_passes_a_schedule_the_ranks_walk():
    got = judge(schedules.SCHEDULE_LENGTH, walked(length=12))
    assert got.status == Status.PASSED and got.why == "the OneCycleLR of 12 steps is walked 12 " \
                                                      "steps"


def test_schedule_length_not_applicable_where_it_cannot_be_told():
    cases = {
        "the OneCycleLR of 100 steps is longer than the 12 steps walked, but not sized from the "
        "dataset: not judged": walked(length=100),
        "the OneCycleLR of 24 steps is longer than the 12 steps walked, but not sized from the "
        "dataset: not judged": walked(batch_size=None),
        "the script's epochs could not be counted (the run did not finish)":
            walked(outcome=Outcome.STOPPED),
        "the OneCycleLR is not stepped once per optimizer step (2 step() calls, 8 optimizer "
        "steps)": walked(stepped=2),
        "the training loader has no length, or its batches per step are not whole":
            walked(sized=False),
        "2 training DataLoaders: which one the schedule follows cannot be told": walked(loaders=2),
        "no scheduler whose length is given (OneCycleLR, CosineAnnealingLR, PolynomialLR)":
            walked(length=0),
    }
    for why, ev in cases.items():
        got = judge(schedules.SCHEDULE_LENGTH, ev)
        assert (got.status, got.why) == (Status.NOT_APPLICABLE, why)


def test_schedule_length_not_applicable_where_the_training_loader_also_evaluated():
    """An accuracy over the training set at the end of a run that finished: the loader's
    iterations are not all epochs, so they are not counted."""
    ev = walked()
    for rank in (0, 1):
        ev.kept[rank]["pass"].append(training_pass(2, training=False, exhausted=True))
    got = judge(schedules.SCHEDULE_LENGTH, ev)
    assert (got.status, got.why) == (
        Status.NOT_APPLICABLE, "the script's epochs could not be counted (the training loader "
                               "also ran 1 pass with no backward, an evaluation over it: its "
                               "passes are not all epochs)")


def test_schedule_length_not_applicable_where_a_rank_has_no_record_of_it():
    ev = walked()
    ev.kept[1]["schedule"] = []
    got = judge(schedules.SCHEDULE_LENGTH, ev)
    assert (got.status, got.why) == (Status.NOT_APPLICABLE, "no record of it on this rank")


def test_schedule_length_not_applicable_on_one_rank():
    got = judge(schedules.SCHEDULE_LENGTH, walked({0: 4}))
    assert (got.status, got.why) == (Status.NOT_APPLICABLE, "one rank")
