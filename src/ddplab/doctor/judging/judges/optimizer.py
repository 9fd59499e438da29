"""Around the optimizer step: ``clip-before-unscale`` and ``lr-not-scaled`` (advisory)."""

from __future__ import annotations

import math

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


def clip_before_unscale(evidence, earlier):
    clips = evidence.records(records.Clip)
    if not clips:
        return not_applicable("no clip_grad_norm_ / clip_grad_value_ call")
    scaled = [c for c in clips if c.scaled]
    if not scaled:
        return passed(f"{len(clips)} clipping calls, none on gradients still scaled by an "
                      "enabled GradScaler")
    c = scaled[0]
    true = c.norm / c.scale if c.norm is not None and c.scale else None
    needed = (f"{number(true / c.limit)}x" if true > c.limit else
              "not at all (the true norm is under the limit)") if true else ""
    numbers = (f": it measured a norm of {number(c.norm)}, the true norm "
               f"{number(true)} times the scale {number(c.scale)}, so clipping to "
               f"{number(c.limit)} shrinks the gradients {number(c.norm / c.limit)}x "
               f"where they needed {needed}" if true else "")
    return found(Problem(
        f"{c.how} at {place(*file_line(c))} clips gradients that the GradScaler has scaled and "
        f"not yet unscaled (no scaler.unscale_(optimizer) before it){numbers}",
        {"measured_norm": c.norm, "scale": c.scale, "true_norm": true,
         "max_norm": c.limit}, *file_line(c)))


def _lrs(values) -> str:
    return ", ".join(number(v) for v in values)


def _first_step(steps: list[records.Step]) -> records.Step | None:
    return next((s for s in steps if s.lr is not None), None)


def _global_batch(step: records.Step) -> int | None:
    sizes = [m.batch for m in step.micro if m.batch]
    return sum(sizes) if sizes and len(sizes) == step.micro_count else None


def lr_not_scaled(evidence, earlier):
    size = evidence.world_size or 0
    if size < 2:
        return not_applicable("one rank")
    if evidence.run.mode == records.Mode.SPAWN:
        return not_applicable("the script starts its own ranks (mp.spawn) and chooses its world "
                              "size itself: there is no one-rank run to compare")
    if earlier.found("same-batches"):
        return not_applicable("explained by same-batches: the ranks draw the same samples, so "
                              "the global batch is one rank's whatever the world size")
    firsts = {r: next((m.digest for s in evidence.records(records.Step, r) for m in s.micro),
                      None) for r in evidence.ranks}
    if None not in firsts.values() and len(set(firsts.values())) == 1:
        return not_applicable("every rank's first DDP forward got the same batch (digest "
                              f"{firsts[evidence.ranks[0]]}): the global batch did not grow "
                              "with the ranks")
    step = _first_step(evidence.records(records.Step))
    if step is None or _global_batch(step) is None:
        return not_applicable("no optimizer step after DDP forwards")
    per_rank = _global_batch(step)
    reads = evidence.all(records.WorldSizeRead)
    probe_step = _first_step(evidence.probe.records(records.Step)) if evidence.probe else None
    if probe_step is not None and _global_batch(probe_step):
        alone, lr_alone = _global_batch(probe_step), probe_step.lr
    elif not reads:
        alone, lr_alone = per_rank, step.lr  # nothing in the script follows the world size
    else:
        r = reads[0].record
        return not_applicable(f"the script reads the world size ({r.how} at "
                              f"{place(*file_line(r))}) before its first step, and no one-rank "
                              "run was made to compare")
    grown = per_rank * size
    if grown <= alone:
        return passed(f"the global batch is {grown} samples on {size} ranks, as on one")
    if lr_alone != step.lr:
        return passed(f"the LR follows the world size: {_lrs(lr_alone)} on one rank, "
                      f"{_lrs(step.lr)} on {size}")
    lr = step.lr[0]
    ratio = grown / alone
    optimizer = next((o for o in evidence.records(records.Optimizer)
                      if o.index == step.optimizer), step)
    return found(Problem(
        f"the global batch grows with the world size ({alone} samples per step on one rank, "
        f"{grown} on {size}) and the LR does not ({number(lr)} on both): linear scaling would "
        f"give {number(lr * ratio)}, square-root scaling {number(lr * math.sqrt(ratio))}"
        + (" (Adam-type optimizers tolerate this better than SGD)"
           if "Adam" in (step.optimizer_type or "") else ""),
        {"global_batch_one_rank": alone, "global_batch": grown, "lr": step.lr,
         "world_size": size, "optimizer": step.optimizer_type},
        *file_line(optimizer)))


FIX_UNSCALE = """\
scaler.scale(loss).backward()
scaler.unscale_(optimizer)  # the true gradients, before clipping them
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
scaler.step(optimizer)
scaler.update()"""


FIX_LR = """\
# linear scaling with the global batch (with a warmup)
lr = base_lr * dist.get_world_size()
# or keep the global batch fixed:
# batch_size = global_batch_size // dist.get_world_size()"""


CLIP_BEFORE_UNSCALE = Check(
    "clip-before-unscale", "error",
    "gradients are clipped after GradScaler.unscale_, not while still scaled",
    "training-loop-mixed-precision",
    FIX_UNSCALE, clip_before_unscale)


LR_NOT_SCALED = Check(
    "lr-not-scaled", "advisory",
    "the LR follows the global batch when the global batch grows with the world size",
    "lr-scaling-rules",
    FIX_LR, lr_not_scaled, defers_to=('same-batches',))
