"""What a rank prints. ``logged-sum-not-divided``: the SUM an all-reduce gave of the ranks'
means (a loss, an accuracy), printed as if it were their mean. ``mean-over-global-count``: a
rank's loss summed over its own shard, printed divided by the whole dataset's count.

The proof is the run's own numbers: each rank's value before the all-reduce (not a whole
number: a mean), the sum after it, and a later printed line on the same rank that shows the
sum, not the sum divided by the world size; for the count, the losses of a whole training pass
on that rank (one backward per batch, each batch's size) and a printed line after it that shows
their sum divided by ``len(dataset)`` (or its batches), not by the rank's own count.
"""

from __future__ import annotations

import math
import re

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

FLOAT = re.compile(r"-?\d+\.(\d+)")


def _shows(text: str, value: float) -> bool:
    """Whether ``text`` prints ``value`` rounded to the decimals it shows (at least two)."""
    for match in FLOAT.finditer(text):
        decimals = len(match.group(1))
        if decimals >= 2 and abs(float(match.group(0)) - value) <= 0.5 * 10 ** -decimals:
            return True
    return False


def logged_sum_not_divided(evidence, earlier):
    size = evidence.world_size or 0
    if size < 2:
        return not_applicable("one rank")
    per_rank = {r: [c for c in evidence.records(records.Collective, r)
                    if c.op == "all_reduce" and not c.by and not c.p2p] for r in evidence.ranks}
    if len({len(v) for v in per_rank.values()}) != 1 or not per_rank[evidence.ranks[0]]:
        return not_applicable("no all-reduce the ranks called alike")
    base = evidence.ranks[0]
    printed = evidence.records(records.Printed, base)
    for i, c in enumerate(per_rank[base]):
        at = {r: v[i] for r, v in per_rank.items()}
        befores = {r: (a.before or [None])[0] for r, a in at.items()}
        total = (c.after or [None])[0]
        if (c.reduce != "SUM" or c.numel != 1 or total is None
                or not str(c.dtype).startswith(("float", "bfloat"))
                or None in befores.values()
                or any(float(v).is_integer() for v in befores.values())):
            continue
        mean = total / size
        later = next((p for p in printed if p.t > c.t), None)
        if later is None or not _shows(later.text, total) or _shows(later.text, mean):
            continue
        return found(Problem(
            f"rank {base} prints \"{later.text.strip()[:80]}\" at {place(*file_line(later))}: "
            f"{number(total)} is the all_reduce(SUM) at {place(*file_line(c))} of the "
            f"{size} ranks' values ("
            + ", ".join(f"rank {r}: {number(v)}" for r, v in sorted(befores.items()))
            + f"), not their mean {number(mean)}: the printed number grows with the world "
              "size",
            {"printed": later.text, "sum": total, "mean": mean, "values": befores,
             "world_size": size}, *file_line(later)))
    return passed("no printed number is an undivided SUM of the ranks' means")


def _pass_losses(evidence, rank, training: records.Pass) -> tuple[list, list, int, float] | None:
    """The losses and batch sizes of a whole training pass (one backward and one DDP forward
    per step), the ``t`` of its last step and of the loader's next pass (what is printed
    between is this epoch's); None where they cannot be told."""
    later = [p.t for p in evidence.records(records.Pass, rank)
             if p.loader == training.loader and p.t > training.t]
    end = min(later, default=float("inf"))
    steps = [s for s in evidence.records(records.Step, rank) if training.t < s.t < end]
    if (len(steps) != training.batches or len(steps) < 2
            or any(s.backward_count != 1 or s.micro_count != 1 for s in steps)):
        return None
    losses = [s.backwards[0].value for s in steps]
    sizes = [s.micro[0].batch for s in steps]
    if None in losses or None in sizes:
        return None
    return losses, sizes, steps[-1].t, end


def mean_over_global_count(evidence, earlier):
    """A rank's sum of losses over its own shard, printed divided by the whole dataset's
    count (``total / len(loader.dataset)``) or batches: 1/world_size of the mean."""
    size = evidence.world_size or 0
    if size < 2:
        return not_applicable("one rank")
    checked = 0
    for rank in evidence.ranks:
        printed = evidence.records(records.Printed, rank)
        for p in evidence.training_passes(rank):
            loader = evidence.loader(p.loader, rank)
            whole = p.exhausted or (p.len is not None and p.batches == p.len)  # a full epoch
            told = _pass_losses(evidence, rank, p) if whole and printed else None
            if told is None or not loader or not loader.dataset_len or not loader.batch_size:
                continue
            losses, sizes, last, end = told
            n, samples = loader.dataset_len, sum(sizes)
            if samples > 0.75 * n:
                continue
            checked += 1
            total = sum(v * b for v, b in zip(losses, sizes))
            wrong = {f"the sum over its {samples} samples / len(dataset) {n}": total / n,
                     **{f"the sum of its {len(losses)} batch means / {k} batches of the "
                        "whole dataset": sum(losses) / k
                        for k in {n // loader.batch_size, math.ceil(n / loader.batch_size)}}}
            right = (total / samples, sum(losses) / len(losses))
            for line in (q for q in printed if last < q.t < end):
                how = next((h for h, v in wrong.items() if _shows(line.text, v)), None)
                if how is None or any(_shows(line.text, v) for v in right):
                    continue
                return found(Problem(
                    f"rank {rank} prints \"{line.text.strip()[:80]}\" at "
                    f"{place(*file_line(line))}: {number(wrong[how])} is {how}, but the rank "
                    f"trained on {samples} of the {n} samples (its shard): its own mean loss "
                    f"is {number(right[0])}, so the printed number is about 1/{size} of it",
                    {"printed": line.text, "value": wrong[how], "rank_samples": samples,
                     "dataset_len": n, "rank_mean": right[0], "loss_sum": total,
                     "batches": len(losses), "world_size": size}, *file_line(line)))
                break
    if not checked:
        return not_applicable("no whole training pass whose losses and printed lines the "
                              "doctor saw on a rank with a shard of the dataset")
    return passed("no printed number is a rank's loss sum divided by the whole dataset's count")


FIX_GLOBAL_COUNT = """\
# each rank summed over its own shard: reduce the sum and the count, then divide
sums = torch.tensor([total_loss, samples_seen], dtype=torch.float64, device=device)
dist.all_reduce(sums)
mean_loss = (sums[0] / sums[1]).item()  # not total_loss / len(train_loader.dataset)"""


FIX_LOG_MEAN = """\
dist.all_reduce(loss_value, op=dist.ReduceOp.SUM)
loss_value /= dist.get_world_size()  # the mean over the ranks, as one process prints it
# or: dist.all_reduce(loss_value, op=dist.ReduceOp.AVG)"""


LOGGED_SUM_NOT_DIVIDED = Check(
    "logged-sum-not-divided", "error",
    "a printed mean over the ranks is the all-reduced sum divided by the world size",
    "averaging-naive",
    FIX_LOG_MEAN, logged_sum_not_divided)


MEAN_OVER_GLOBAL_COUNT = Check(
    "mean-over-global-count", "error",
    "a loss a rank summed over its shard is printed divided by the rank's count, not "
    "the whole dataset's",
    "training-loop-printing",
    FIX_GLOBAL_COUNT, mean_over_global_count)
