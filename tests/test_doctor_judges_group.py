"""The group judges (``judges/group.py``) on hand-built records, one test per branch:
``duplicate-rank``, ``no-process-group``."""

from __future__ import annotations

from ddplab.doctor.judging.findings import Status
from ddplab.doctor.judging.judges import group
from ddplab.doctor.messages import Done, LauncherDone
from ddplab.doctor.records import DuplicateRank, GroupInit, LocalRankOption, Mode, Outcome
from judge_records import FILE, crashed, evidence, judge

GLOO = GroupInit(file=FILE, line=12, requested="gloo", used="gloo", backend="gloo",
                 world_size=2)


def test_duplicate_rank_found_from_the_process_that_claimed_it_second():
    """The second process to pass rank=0 fails before the group forms; its record comes with
    its outcome, since it has no group to publish evidence through."""
    claim = DuplicateRank(rank=0, world_size=2, pid=10507, file=FILE, line=31)
    ev = evidence({}, world_size=2, outcomes={
        0: Done(Outcome.CRASHED), 1: Done(Outcome.CRASHED, records={claim.KIND: [claim]})})
    got = judge(group.DUPLICATE_RANK, ev)
    assert got.status == Status.FOUND
    assert got.why.startswith("two processes passed rank=0 to init_process_group")
    assert got.problems[0].evidence == {"rank": 0, "world_size": 2, "pid": 10507}
    assert got.problems[0].line == 31


def test_duplicate_rank_passes_a_group_that_formed():
    got = judge(group.DUPLICATE_RANK, evidence({0: [GLOO], 1: [GLOO]}))
    assert got.status == Status.PASSED and "a rank of its own" in got.why


def test_duplicate_rank_not_applicable_without_a_group():
    got = judge(group.DUPLICATE_RANK, evidence({0: [], 1: []}))
    assert got.status == Status.NOT_APPLICABLE and got.why == "no process group was formed"


def never_joined(outcome=Outcome.FINISHED, options=(), crash=None):
    """A script rank 0's process ran to ``outcome`` without joining a group."""
    kept = {LocalRankOption.KIND: list(options)} if options else None
    return evidence({}, world_size=2, outcomes={}, mode=Mode.NONE,
                    launcher=LauncherDone(outcome, steps=3, records=kept, crash=crash))


def test_no_process_group_found_with_the_local_rank_option_that_kept_it_alone():
    option = LocalRankOption(name="--local_rank", default=-1, file=FILE, line=14)
    got = judge(group.NO_PROCESS_GROUP, never_joined(options=[option]))
    assert got.status == Status.FOUND
    assert "its --local_rank option (default -1) is never given by torchrun" in got.why
    assert got.problems[0].line == 14


def test_no_process_group_found_without_an_option_to_blame():
    got = judge(group.NO_PROCESS_GROUP, never_joined())
    assert got.status == Status.FOUND
    assert "(init_process_group was never called)" in got.why and got.problems[0].line is None


def test_no_process_group_not_applicable_when_the_script_failed_first():
    got = judge(group.NO_PROCESS_GROUP, never_joined(
        Outcome.CRASHED, crash=crashed("ModuleNotFoundError: No module named 'wandb'").crash))
    assert got.status == Status.NOT_APPLICABLE and "failed before it could join" in got.why


def test_no_process_group_not_applicable_to_ranks_in_a_group():
    got = judge(group.NO_PROCESS_GROUP, evidence({0: [GLOO], 1: [GLOO]}))
    assert got.status == Status.NOT_APPLICABLE
    assert got.why == "the script joined a process group or started its own ranks"
