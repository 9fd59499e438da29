"""Every check the doctor runs, in the report's order: one ``check.Check`` record each, which
stands in its judge's module beside the judge, its texts and its fix (the shape of
torchtitan's ``train_spec``: what reads the checks loops over this tuple). ``judge`` runs them
on a run's evidence; a check reads the findings of the checks before it only as its record
declares (``defers_to``, ``reads_explanations``)."""

from __future__ import annotations

from ddplab.doctor.judging.check import url_of
from ddplab.doctor.judging.findings import Finding, Verdict
from ddplab.doctor.judging.judgement import Earlier
from ddplab.doctor.judging.judges import (
    accumulation,
    collectives,
    crash,
    data,
    devices,
    files,
    group,
    hang,
    metric,
    model,
    optimizer,
    printed,
    reference,
    schedules,
    shards,
    state_dict,
)
from ddplab.doctor.messages import to_json

CHECKS = (
    group.DUPLICATE_RANK, data.SAMPLER_SET_EPOCH, data.NO_DISTRIBUTED_SAMPLER,
    shards.DIFFERENT_DATASETS, shards.OVERLAPPING_SHARDS, shards.SAME_BATCHES,
    data.UNEVEN_INPUTS, collectives.COLLECTIVE_ON_SOME_RANKS, devices.CPU_TENSOR_NCCL,
    devices.RANKS_SHARE_GPU, model.FIND_UNUSED_PARAMETERS,
    accumulation.ACCUMULATION_NO_SYNC,
    accumulation.ACCUMULATION_UNSYNCED_STEP, accumulation.ACCUMULATION_LOSS_NOT_DIVIDED,
    model.REPLICAS_DIVERGE, collectives.GRADIENTS_REDUCED_TWICE, collectives.BARRIER_EVERY_STEP,
    optimizer.CLIP_BEFORE_UNSCALE, metric.METRIC_MEAN_OF_MEANS, printed.LOGGED_SUM_NOT_DIVIDED,
    printed.MEAN_OVER_GLOBAL_COUNT, files.EVERY_RANK_WRITES, files.READ_WHILE_WRITTEN,
    optimizer.LR_NOT_SCALED,
    schedules.SCHEDULE_LENGTH, group.NO_PROCESS_GROUP, crash.KNOWN_CRASH,
    state_dict.STATE_DICT_PREFIX, reference.REFERENCE_DIFFERS, hang.HANG,
)


def _check_order(checks) -> None:
    """Ids are unique, and a check defers only to checks before it."""
    seen = set()
    for check in checks:
        if check.id in seen:
            raise ValueError(f"two checks are named {check.id!r}")
        later = [d for d in check.defers_to if d not in seen and d != "*"]
        if later:
            raise ValueError(f"check {check.id!r} defers to {', '.join(later)}, which do not "
                             "come before it")
        seen.add(check.id)


_check_order(CHECKS)


def judge(evidence, checks=CHECKS) -> list[Verdict]:
    """Every check on ``evidence``, in order."""
    crash = evidence.crashed()
    verdicts, earlier = [], []
    for check in checks:
        judgement = check.judge(evidence, Earlier(earlier, check))
        findings = []
        for problem in judgement.problems:
            explains = bool((check.explains_hang and evidence.run.hang)
                            or check.explains.match(crash))
            message, about = problem.message, problem.evidence
            if explains and evidence.hung():  # say where every rank is
                hung = evidence.run.hang
                message += ". The run hung: " + hang.describe_hang(
                    evidence, hung.alarm, hung.positions)
                about = dict(about, hang=to_json(hung))
            section = problem.section or check.section
            findings.append(Finding(
                id=check.id, kind=problem.kind or check.kind, message=message,
                evidence=about, file=problem.file, line=problem.line, section=section,
                url=url_of(section), fix=problem.fix or check.fix, explains=explains))
        earlier.extend(findings)
        verdicts.append(Verdict(check.id, check.kind, judgement.status, judgement.why,
                                findings))
    return verdicts



