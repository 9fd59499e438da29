"""Evidence built by hand, for the judges' millisecond tests: the records each rank would have
recorded, in order, as the doctor's process reads them back (``messages.Run`` of
``RankEvidence``), with no rank started.

    ev = evidence({0: [Loader(...), Pass(...)], 1: [...]})
    judgement = judge(data.SAMPLER_SET_EPOCH, ev)
"""

from __future__ import annotations

import dataclasses

from ddplab.doctor.judging.evidence import Evidence
from ddplab.doctor.judging.judgement import Earlier
from ddplab.doctor.messages import Done, RankEvidence, Run
from ddplab.doctor.records import Mode, Outcome, Step


def evidence(by_rank: dict, world_size: int | None = None, outcomes: dict | None = None,
             mode: Mode = Mode.RANKS, **run) -> Evidence:
    """``by_rank``: rank -> its records in the order it saw them (each stamped ``t`` by that
    order, ``step`` as given). ``outcomes``: rank -> ``Done`` (every rank finished if None)."""
    size = world_size or len(by_rank)
    ranks = {}
    for rank, seen in by_rank.items():
        kept: dict = {}
        for t, record in enumerate(seen):
            kept.setdefault(record.KIND, []).append(dataclasses.replace(record, t=t))
        steps = len(kept.get(Step.KIND, []))
        ranks[rank] = RankEvidence(rank, size, steps, "host", kept)
    if outcomes is None:
        outcomes = {rank: Done(Outcome.FINISHED, steps=e.steps) for rank, e in ranks.items()}
    return Evidence(Run(mode=mode, world_size=size, evidence=ranks, outcomes=outcomes, **run))


def judge(check, ev: Evidence, earlier=()):
    """``check``'s judgement of ``ev``, with ``earlier`` the findings of the checks before."""
    return check.judge(ev, Earlier(list(earlier), check))
