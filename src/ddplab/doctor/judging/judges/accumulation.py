"""Gradient accumulation: ``accumulation-no-sync`` (every micro-step all-reduced),
``accumulation-unsynced-step`` (the step after a micro-step that did not synchronise), and
``accumulation-loss-not-divided`` (the loss of k micro-steps summed, not averaged).

A micro-step is a DDP forward with gradients enabled between two optimizer steps; whether it
synchronises is DDP's ``require_backward_grad_sync`` at that forward, which ``no_sync()``
and nanoGPT's direct assignment both set.
"""

from __future__ import annotations

import ddplab.doctor.records as records
from ddplab.doctor.judging.check import Check
from ddplab.doctor.judging.findings import place
from ddplab.doctor.judging.judgement import (
    Problem,
    file_line,
    found,
    not_applicable,
    number,
    passed,
)


def _accumulating(evidence) -> list:
    return [s for s in evidence.records(records.Step) if s.backward_count > 1]


def accumulation_no_sync(evidence, earlier):
    steps = [s for s in _accumulating(evidence) if s.micro]
    if not steps:
        return not_applicable("no optimizer step accumulates several DDP micro-steps")
    wasteful = [s for s in steps if all(m.sync for m in s.micro)]
    if not wasteful:
        return passed("the micro-steps before the last run under no_sync")
    s = wasteful[0]
    k = s.micro_count
    ddp = next((d for d in evidence.records(records.Ddp) if d.index == s.micro[0].ddp), None)
    size = (ddp.bytes if ddp else 0) / 2 ** 20
    first = s.backwards[0]
    return found(Problem(
        f"{k} micro-steps per optimizer step (step {s.number} at {place(*file_line(s))}), and "
        f"DDP all-reduced the gradients ({size:.3g} MiB) after each of them: only the last of "
        f"the {k} all-reduces is needed, the {k - 1} before it move data for nothing",
        {"micro_steps": k, "allreduces_per_step": k, "gradient_mib": size},
        *file_line(first)))


def accumulation_unsynced_step(evidence, earlier):
    steps = [s for s in evidence.records(records.Step) if s.micro]
    if not steps:
        return not_applicable("no optimizer step after a DDP forward")
    unsynced = [s for s in steps if not s.micro[-1].sync]
    if not unsynced:
        return passed("the last micro-step before every step synchronised the gradients")
    s = unsynced[0]
    grads = {r: next((x.grads for x in evidence.records(records.Step, r)
                      if x.number == s.number), None) for r in evidence.ranks}
    differing, norms = [], {}
    if all(grads.values()) and len(grads) > 1:
        names = sorted(set.intersection(*(set(g) for g in grads.values())))
        differing = [n for n in names if len({grads[r][n][0] for r in grads}) > 1]
        if differing:
            norms = {r: grads[r][differing[0]][2] for r in grads}
    detail = (f"; {len(differing)} of the gradients differ across ranks at that step ("
              f"{differing[0]}: norm " + ", ".join(f"{number(v)} on rank {r}"
                                                   for r, v in sorted(norms.items())) + ")"
              if differing else "")
    k = s.micro_count
    return found(Problem(
        f"optimizer step {s.number} at {place(*file_line(s))} follows {k} micro-step"
        f"{'s' if k > 1 else ''} none of which synchronised the gradients (the last one ran "
        "under no_sync or with require_backward_grad_sync=False): each rank steps with its "
        "own gradients and the replicas drift apart" + detail,
        {"step": s.number, "micro_steps": k,
         "synced": [m.sync for m in s.micro], "differing_gradients": differing,
         "gradient_norms": norms}, *file_line(s)))


def accumulation_loss_not_divided(evidence, earlier):
    steps = _accumulating(evidence)
    if not steps:
        return not_applicable("no optimizer step accumulates several backwards")
    for s in steps:
        k = s.backward_count
        kept = [b for b in s.backwards if b.factor is not None]
        if not kept:
            continue
        odd = next((b for b in kept if abs(b.factor * k - 1) > 1e-6), None)
        if odd is None:
            continue
        divided = [i + 1 for i, b in enumerate(s.backwards)
                   if b.factor is not None and abs(b.factor * k - 1) <= 1e-6]
        factor = odd.factor
        shown = ("the loss function's output itself" if factor == 1 else
                 f"the loss function's output {' '.join(odd.ops)}")
        which = s.backwards.index(odd) + 1
        some = (f"; micro-step{'s' if len(divided) > 1 else ''} "
                f"{', '.join(map(str, divided))} divide{'s' * (len(divided) == 1)} by {k}, "
                f"micro-step {which} does not" if divided else "")
        scale = sum(b.factor for b in kept) if len(kept) == k else factor * k
        return found(Problem(
            f"{k} micro-steps per optimizer step (step {s.number}), and the loss given to "
            f"backward at {place(*file_line(odd))} is {shown}, not divided by {k}{some}: the "
            f"step's gradient weighs that micro-batch {number(factor * k)}x (the step's "
            f"gradient is {number(scale)}x the mean of the micro-batches' gradients where "
            "all are alike; with SGD, a larger learning rate; Adam scales most of it away, "
            "but gradient clipping sees it whole)",
            {"micro_steps": k, "loss_factor": factor, "gradient_scale": factor * k,
             "factors": [b.factor for b in s.backwards], "divided_micro_steps": divided},
            *file_line(odd)))
    return passed("the loss of each micro-step is divided by the number of micro-steps")


FIX_NO_SYNC = """\
for i, (x, y) in enumerate(micro_batches):
    last = i == len(micro_batches) - 1
    # all-reduce once, at the last
    with contextlib.nullcontext() if last else model.no_sync():
        loss = loss_fn(model(x), y) / len(micro_batches)
        loss.backward()
optimizer.step()"""


FIX_DIVIDE = """\
# the mean of the micro-batches' gradients
loss = loss_fn(model(x), y) / accumulation_steps
loss.backward()"""


ACCUMULATION_NO_SYNC = Check(
    "accumulation-no-sync", "waste",
    "micro-steps before the last run under no_sync (one all-reduce per optimizer step)",
    "time-cost-accumulation",
    FIX_NO_SYNC, accumulation_no_sync)


ACCUMULATION_UNSYNCED_STEP = Check(
    "accumulation-unsynced-step", "error",
    "the last micro-step before an optimizer step synchronises the gradients",
    "time-cost-accumulation",
    FIX_NO_SYNC, accumulation_unsynced_step)


ACCUMULATION_LOSS_NOT_DIVIDED = Check(
    "accumulation-loss-not-divided", "error",
    "with k micro-steps per step, the loss given to backward is divided by k",
    "time-cost-accumulation",
    FIX_DIVIDE, accumulation_loss_not_divided)
