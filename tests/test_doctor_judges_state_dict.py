"""``state-dict-prefix`` (``judges/state_dict.py``) on hand-built records, one test per
branch: a saved state dict named with DDP's ``module.``, an advisory."""

from __future__ import annotations

from ddplab.doctor.judging import error_index
from ddplab.doctor.judging.findings import Status
from ddplab.doctor.judging.judges import crash, state_dict
from ddplab.doctor.records import LoadStateDict, Write
from judge_records import FILE, earlier_finding, evidence, judge

SAVE = Write(step=8, file=FILE, line=70, path="/home/reader/run/checkpoint.pt",
             how="torch.save", prefixed=6, first_key="module.net.0.weight")
PLAIN = Write(step=8, file=FILE, line=72, path="/home/reader/run/log.txt", how="open",
              mode="w")


def test_state_dict_prefix_found_as_advice_where_the_run_never_loads_it():
    got = judge(state_dict.STATE_DICT_PREFIX, evidence({0: [SAVE, PLAIN], 1: [PLAIN]}))
    assert got.status == Status.FOUND
    assert ("torch.save at train.py:70 saves a state dict whose 6 keys all start with "
            "'module.' ('module.net.0.weight', ...) into") in got.why
    assert got.problems[0].evidence["ranks"] == [0] and got.problems[0].line == 70


def test_state_dict_prefix_passes_a_state_loaded_back_into_ddp():
    load = LoadStateDict(step=8, file=FILE, line=75, module="DistributedDataParallel",
                         after_wrap=True, wrapped=True)
    got = judge(state_dict.STATE_DICT_PREFIX, evidence({0: [SAVE, load], 1: [load]}))
    assert got.status == Status.PASSED and "(at train.py:75)" in got.why


def test_state_dict_prefix_passes_to_the_crash_known_crash_named():
    prefix = earlier_finding(crash.KNOWN_CRASH, explains=True, section=error_index.PREFIX_LABEL)
    got = judge(state_dict.STATE_DICT_PREFIX, evidence({0: [SAVE], 1: []}), [prefix])
    assert got.status == Status.PASSED and got.why == "the crash above is this prefix " \
                                                      "(known-crash)"


def test_state_dict_prefix_not_applicable_without_a_prefixed_save():
    got = judge(state_dict.STATE_DICT_PREFIX, evidence({0: [PLAIN], 1: [PLAIN]}))
    assert got.status == Status.NOT_APPLICABLE and "no torch.save" in got.why
