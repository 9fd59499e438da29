"""``metric-mean-of-means``: an evaluation metric averaged over ranks whose shards differ, or
an evaluation sampler that pads its last shard with repeated samples.

Two signals, both from the run: a DistributedSampler in an evaluation pass (no backward) with
``drop_last=False`` and a dataset that the world size does not divide (the padding repeats
samples, and a reduction follows); and a reduction of one non-integral number per rank (a
rank's mean) with ``SUM`` or ``AVG`` after evaluation passes that gave the ranks different
numbers of samples, with no count reduced beside it.
"""

from __future__ import annotations

import ddplab.doctor.records as records
from ddplab.doctor.judging.findings import place
from ddplab.doctor.judging.judgement import (
    Problem,
    file_line,
    found,
    not_applicable,
    number,
    passed,
)

REDUCTIONS = ("all_reduce", "reduce")


def _padded(evidence) -> list:
    evaluation = {(p.loader, p.number): p for p in evidence.records(records.Pass)
                  if not p.training and p.exhausted}  # not a peek at one batch
    later = [c for c in evidence.records(records.Collective) if not c.p2p]
    problems = []
    for order in evidence.records(records.SamplerOrder):
        key = (order.loader, order.pass_number)
        size, replicas = order.dataset_len, order.num_replicas
        if (key not in evaluation or order.drop_last or not size or size % replicas == 0
                or not any(c.t > order.t for c in later)):
            continue
        extra = order.total_size - size
        loader = evidence.loader(order.loader)
        reduced = next(c for c in later if c.t > order.t)
        problems.append(Problem(
            f"the evaluation DistributedSampler of the DataLoader made at "
            f"{place(*file_line(loader))} splits {size} samples over {replicas} ranks and pads "
            f"them to {order.total_size}: {extra} sample{'s are' if extra > 1 else ' is'} "
            f"evaluated twice, and the {reduced.op} at {place(*file_line(reduced))} counts "
            f"{'them' if extra > 1 else 'it'} twice in the metric",
            {"dataset_len": size, "num_replicas": replicas, "padded_to": order.total_size,
             "repeated": extra}, *file_line(evaluation[key])))
        break
    return problems


def _mean_of_means(evidence) -> list:
    per_rank = {r: [c for c in evidence.records(records.Collective, r)
                    if c.op in REDUCTIONS and not c.p2p] for r in evidence.ranks}
    if not per_rank or len({len(v) for v in per_rank.values()}) != 1:
        return []
    problems = []
    for i, c in enumerate(per_rank[evidence.ranks[0]]):
        at = {r: calls[i] for r, calls in per_rank.items()}
        counts = {r: a.eval_samples for r, a in at.items()}
        values = {r: (a.before or [None])[0] for r, a in at.items()}
        if (c.numel != 1 or not str(c.dtype).startswith(("float", "bfloat"))
                or c.reduce not in ("SUM", "AVG") or min(counts.values()) == 0
                or len(set(counts.values())) == 1 or None in values.values()
                or all(float(v).is_integer() for v in values.values())):
            continue
        window = [per_rank[r][j] for r in per_rank for j in (i - 1, i + 1)
                  if 0 <= j < len(per_rank[r])]
        if any(w.numel and w.numel > 1 or (w.before or [None])[0] in counts.values()
               for w in window):
            continue  # the counts (or sums and counts together) are reduced too
        total = sum(counts.values())
        weighted = sum(values[r] * counts[r] for r in counts) / total
        plain = sum(values.values()) / len(values)
        problems.append(Problem(
            f"{c.op}({c.reduce}) at {place(*file_line(c))} combines one mean per rank ("
            + ", ".join(f"rank {r}: {number(values[r])} over {counts[r]} samples"
                        for r in sorted(counts))
            + f"): the mean of the ranks' means is {number(plain)}, the mean over all "
              f"{total} samples {number(weighted)}: ranks with fewer samples weigh more",
            {"values": values, "samples": counts, "mean_of_means": plain,
             "sample_mean": weighted}, *file_line(c)))
        break
    return problems


def metric_mean_of_means(evidence, earlier):
    evaluated = [p for p in evidence.records(records.Pass) if not p.training and p.exhausted]
    if not evaluated:
        return not_applicable("no evaluation pass over a DataLoader (a whole pass without "
                              "backward)")
    problems = _padded(evidence) + _mean_of_means(evidence)
    if problems:
        return found(*problems)
    return passed("no padded evaluation shard is reduced, and no per-rank mean over unequal "
                  "shards is averaged")
