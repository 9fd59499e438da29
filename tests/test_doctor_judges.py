"""Each judge on hand-built records (``judge_records``), one test per branch, in milliseconds:
what the corpus runs prove is recorded, these prove is judged. The tests of a judge module
``judges/<family>.py`` are in ``test_doctor_judges_<family>.py``; a branch that only a real
run reaches is named there and in the corpus test."""

from __future__ import annotations

import pathlib

import pytest

from ddplab.doctor.judging import judges
from ddplab.doctor.judging.findings import Finding
from ddplab.doctor.judging.judgement import Earlier
from ddplab.doctor.judging.judges import data, state_dict


def test_every_judge_module_has_its_tests():
    here = pathlib.Path(__file__).parent
    families = sorted(p.stem for p in pathlib.Path(judges.__file__).parent.glob("[!_]*.py"))
    missing = [f for f in families if not (here / f"test_doctor_judges_{f}.py").exists()]
    assert len(families) >= 14 and missing == []


def test_a_judge_reads_only_the_checks_its_record_names():
    """``earlier`` refuses what the record does not declare, and gives what it does."""
    prefix = Finding("known-crash", "error", "m", {}, None, None, "errors-state-dict-prefix",
                     "u", "fix")
    with pytest.raises(ValueError, match="defers_to"):
        Earlier([prefix], data.SAMPLER_SET_EPOCH).found("known-crash")
    with pytest.raises(ValueError, match="reads_explanations"):
        Earlier([prefix], data.SAMPLER_SET_EPOCH).explaining()
    assert Earlier([prefix], state_dict.STATE_DICT_PREFIX).found("known-crash") == [prefix]
