"""Evidence built by hand, for the judges' millisecond tests: the records each rank would have
recorded, in order, as the doctor's process reads them back (``messages.Run`` of
``RankEvidence``), with no rank started.

    ev = evidence({0: [loader(), training_pass(0)], 1: [...]})
    judgement = judge(data.SAMPLER_SET_EPOCH, ev)

The builders give the records most judges read, with the values a 2-rank run of a corpus
script records (64 samples, batches of 8, 4 batches a rank per epoch); a test names only what
its branch turns on.
"""

from __future__ import annotations

import dataclasses

from ddplab.doctor.judging.evidence import Evidence
from ddplab.doctor.judging.findings import Finding
from ddplab.doctor.judging.judgement import Earlier
from ddplab.doctor.messages import Crash, Done, RankEvidence, Run
from ddplab.doctor.records import (
    Backward,
    Collective,
    Ddp,
    Loader,
    MicroStep,
    Mode,
    Outcome,
    Pass,
    SamplerOrder,
    Step,
)

FILE = "train.py"  # the reader's script, as a record names it (shown as it is)


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


def loader(**changes) -> Loader:
    """A training DataLoader over 64 samples, a DistributedSampler's 32 of them on this rank."""
    fields = dict(index=0, file=FILE, line=20, dataset="TensorDataset", dataset_len=64,
                  fingerprint="tensors:1815ccea18c04ffe,5e6ddbc71bf3f232", iterable=False,
                  sampler="DistributedSampler", distributed=True, sampler_len=32, batch_size=8,
                  drop_last=False, iterations=2)
    return Loader(**{**fields, **changes})


def training_pass(number: int, **changes) -> Pass:
    """The ``number``-th pass over loader 0, its 4 batches drawn with a backward."""
    fields = dict(loader=0, number=number, len=4, file=FILE, line=30, batches=4, samples=32,
                  training=True, capped=True, first=f"875f49ef6b67ffd{number}")
    return Pass(**{**fields, **changes})


def sampler_order(number: int, digest: str, **changes) -> SamplerOrder:
    """The order a shuffling DistributedSampler gave rank 0 for pass ``number`` of loader 0."""
    fields = dict(sampler=0, epoch=0, shuffle=True, seed=0, drop_last=False, num_replicas=2,
                  sampler_rank=0, dataset_len=64, total_size=64, first=[44, 17, 47, 35, 33, 63],
                  count=32, digest=digest, loader=0, pass_number=number)
    return SamplerOrder(**{**fields, **changes})


def step(number: int, micro=(True,), factors=(1.0,), batch: int | None = 8,
         digests=None, losses=None, **changes) -> Step:
    """Optimizer step ``number`` (taken after ``number - 1`` steps): one DDP micro-step per
    ``micro`` (whether it synchronised), one backward per ``factors`` (its loss factor) and
    ``losses`` (its loss's value)."""
    digests = digests or [None] * len(micro)
    losses = losses or [None] * len(factors)
    fields = dict(step=number - 1, file=FILE, line=45, number=number,
                  micro=[MicroStep(ddp=0, sync=s, batch=batch, digest=d)
                         for s, d in zip(micro, digests)],
                  micro_count=len(micro),
                  backwards=[Backward(file=FILE, line=44, factor=f,
                                      ops=[] if f in (1, None) else [f"/ {round(1 / f)}"],
                                      under="NllLossBackward0", value=v)
                             for f, v in zip(factors, losses)],
                  backward_count=len(factors), optimizer=0)
    return Step(**{**fields, **changes})


def collective(op: str = "all_reduce", **changes) -> Collective:
    """The script's own collective in the default group, on a float32 CPU tensor under gloo."""
    fields = dict(file=FILE, line=50, op=op, seq=0, group="world", devices=["cpu"], nccl=False,
                  requested="gloo", reduce="SUM" if op in ("all_reduce", "reduce") else None,
                  dtype="float32", numel=1, before=None, eval_samples=0, p2p=False)
    return Collective(**{**fields, **changes})


def ddp(**changes) -> Ddp:
    """DDP 0 around a small model on the CPU, with DDP's defaults."""
    fields = dict(file=FILE, line=40, index=0, find_unused=False, broadcast_buffers=True,
                  static_graph=False, devices=["cpu"], nccl=False, requested="gloo", params=3,
                  numel=834, bytes=3336, buffers=0, module="Net")
    return Ddp(**{**fields, **changes})


def crashed(error: str, line: int = 60, **changes) -> Done:
    """How a rank ended when the script raised ``error`` (``Type: message``) at ``line``."""
    fields = dict(type=error.split(":")[0], error=error, script_file=FILE, script_line=line,
                  traceback=f'  File "{FILE}", line {line}, in <module>\n{error}\n')
    return Done(Outcome.CRASHED, crash=Crash(**{**fields, **changes}))


def earlier_finding(check, explains: bool = False, section: str | None = None) -> Finding:
    """A finding of ``check`` (a ``Check``), as an earlier check's verdict gives it to a
    judge that defers to it or reads what explains a failure."""
    return Finding(check.id, check.kind, "what it found", {}, FILE, 10, section or check.section,
                   check.url, check.fix, explains=explains)
