"""``known-crash`` (``judges/crash.py``) on hand-built records, one test per branch: a crash
looked up in the book's error index when no check before it explains it."""

from __future__ import annotations

from ddplab.doctor.judging.findings import Status
from ddplab.doctor.judging.judges import crash, data
from ddplab.doctor.messages import Crash, LauncherDone
from ddplab.doctor.records import Mode, Outcome
from judge_records import crashed, earlier_finding, evidence, judge


def test_known_crash_found_with_its_entry_at_the_scripts_line():
    ev = evidence({0: [], 1: []}, outcomes={
        0: crashed("ValueError: sampler option is mutually exclusive with shuffle", line=24),
        1: crashed("ValueError: sampler option is mutually exclusive with shuffle", line=24)})
    got = judge(crash.KNOWN_CRASH, ev)
    assert got.status == Status.FOUND
    problem = got.problems[0]
    assert got.why.startswith("the script crashed (ValueError: sampler option is mutually "
                              "exclusive with shuffle): a DataLoader given a sampler")
    assert (problem.section, problem.line) == ("errors-sampler-shuffle", 24)
    assert problem.evidence["rank"] == 0 and "set_epoch(epoch)" in problem.fix


def test_known_crash_found_in_the_launchers_own_crash():
    """A spawning script failed in rank 0's process before it started its ranks."""
    failure = Crash(type="AssertionError", error="AssertionError: Torch not compiled with CUDA "
                    "enabled", traceback="", script_file="train.py", script_line=9)
    ev = evidence({}, outcomes={}, mode=Mode.SPAWN,
                  launcher=LauncherDone(Outcome.CRASHED, crash=failure))
    got = judge(crash.KNOWN_CRASH, ev)
    assert got.status == Status.FOUND and got.problems[0].section == "errors-no-cuda"
    assert got.problems[0].evidence["rank"] is None and got.problems[0].line == 9


def test_known_crash_passes_a_crash_a_check_above_explains():
    ev = evidence({0: [], 1: []}, outcomes={0: crashed("RuntimeError: Connection closed by "
                                                       "peer")})
    got = judge(crash.KNOWN_CRASH, ev, [earlier_finding(data.UNEVEN_INPUTS, explains=True),
                                        earlier_finding(data.SAMPLER_SET_EPOCH)])
    assert got.status == Status.PASSED and got.why == "the crash is explained above " \
                                                      "(uneven-inputs)"


def test_known_crash_not_applicable_to_a_crash_the_index_does_not_know():
    ev = evidence({0: [], 1: []}, outcomes={0: crashed("ZeroDivisionError: division by zero")})
    got = judge(crash.KNOWN_CRASH, ev)
    assert got.status == Status.NOT_APPLICABLE and "matches no entry" in got.why


def test_known_crash_not_applicable_without_a_crash():
    got = judge(crash.KNOWN_CRASH, evidence({0: [], 1: []}))
    assert got.status == Status.NOT_APPLICABLE and got.why == "the script did not crash"
