"""``metric-mean-of-means``: an evaluation metric averaged over ranks whose shards differ, or
an evaluation sampler that pads its last shard with repeated samples.

Two signals, both from the run. A DistributedSampler in an evaluation pass (no backward) with
``drop_last=False`` and a dataset that the world size does not divide repeats samples: it is
an error where the run shows a repeat in the metric (a gathered result that holds a sample
twice, ``ranks/watch/gathered.py``, or a reduced count larger than the dataset), passes where
the gathered result holds each sample once (interleaved and cut), and is an advisory where
the doctor cannot see. And a reduction of one non-integral number per rank (a rank's mean)
with ``SUM`` or ``AVG`` after evaluation passes that gave the ranks different numbers of
samples, with no count reduced beside it.
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

REDUCTIONS = ("all_reduce", "reduce")


FIX_INTERLEAVE = """\
gathered = [torch.empty_like(predictions) for _ in range(world_size)]
dist.all_gather(gathered, predictions)
# sample i is on rank i % world_size: interleave the ranks, then cut off the padding
predictions = torch.stack(gathered, dim=1).reshape(-1)[:len(eval_dataset)]"""


def _samples(ids: list) -> str:
    return ", ".join(map(str, ids))


def _gathered(uses, order, loader) -> tuple[list, str | None]:
    """(problems, why it passed) from the uses of the rows an all_gather brought."""
    repeating = [u for u in uses if u.repeated]
    if repeating:
        u = repeating[0]
        twice = ", ".join(f"sample {i} {u.repeats[str(i)]} times" for i in u.repeated)
        return [Problem(
            f"the evaluation DistributedSampler of the DataLoader made at "
            f"{place(*file_line(loader))} pads {order.dataset_len} samples to "
            f"{order.total_size}; the predictions gathered at "
            f"{place(u.gather_file, u.gather_line)} and used at {place(*file_line(u))} "
            f"({u.how}) hold {u.samples} samples: {twice}"
            + (f", and never sample {_samples(u.missing)}" if u.missing else "")
            + ": concatenating the ranks' rows rank by rank puts a padded repeat where the "
              "cut to the dataset's length does not reach it",
            {"dataset_len": order.dataset_len, "num_replicas": order.num_replicas,
             "padded_to": order.total_size, "samples": u.samples, "distinct": u.distinct,
             "repeated": u.repeated, "missing": u.missing},
            *file_line(u), fix=FIX_INTERLEAVE)], None
    exact = [u for u in uses if u.distinct == u.samples == order.dataset_len]
    if exact:
        u = exact[0]
        return [], (f"the predictions gathered at {place(u.gather_file, u.gather_line)} and "
                    f"used at {place(*file_line(u))} hold each of the {u.samples} samples "
                    "once: the padding is cut off")
    return [], None


def _padded(evidence) -> tuple[list, list]:
    """(problems, why passes) for evaluation DistributedSamplers that pad their shards: an
    error where this run shows a repeat counted (a gathered result that holds a sample twice,
    or a reduced count larger than the dataset); an advisory where it cannot see."""
    evaluation = {(p.loader, p.number): p for p in evidence.records(records.Pass)
                  if not p.training and p.exhausted}  # not a peek at one batch
    later = [c for c in evidence.records(records.Collective)
             if not c.p2p and not c.by and c.op not in ("barrier", "monitored_barrier")]
    uses = evidence.records(records.GatheredUse)
    problems, passes = [], []
    for order in evidence.records(records.SamplerOrder):
        key = (order.loader, order.pass_number)
        size, replicas = order.dataset_len, order.num_replicas
        if (key not in evaluation or order.drop_last or not size or size % replicas == 0
                or not any(c.t > order.t for c in later)):
            continue
        extra = order.total_size - size
        loader = evidence.loader(order.loader)
        mine = [u for u in uses if (u.loader, u.pass_number) == key]
        found_here, why = _gathered(mine, order, loader)
        if found_here or why:
            problems += found_here
            passes += [why] if why else []
            if found_here:
                break
            continue
        reduced = next(c for c in later if c.t > order.t)
        counted = next((c for c in later if c.t > order.t and c.op in REDUCTIONS
                        and order.total_size in (c.after or [])), None)
        head = (f"the evaluation DistributedSampler of the DataLoader made at "
                f"{place(*file_line(loader))} splits {size} samples over {replicas} ranks and "
                f"pads them to {order.total_size}: {extra} sample{'s are' if extra > 1 else ' is'}"
                " evaluated twice")
        about = {"dataset_len": size, "num_replicas": replicas, "padded_to": order.total_size,
                 "repeated": extra}
        if counted is not None:
            problems.append(Problem(
                f"{head}, and the {counted.op} at {place(*file_line(counted))} counts "
                f"{order.total_size} samples where the dataset has {size}",
                dict(about, reduced_count=order.total_size), *file_line(evaluation[key])))
        else:
            problems.append(Problem(
                f"{head}; the doctor could not see whether the repeat reaches the metric "
                f"reduced by the {reduced.op} at {place(*file_line(reduced))} (it is cut off "
                "when the ranks' results are interleaved and cut to the dataset's length)",
                about, *file_line(evaluation[key]), kind="advisory"))
        break
    return problems, passes


def _mean_of_means(evidence) -> list:
    per_rank = {r: [c for c in evidence.records(records.Collective, r)
                    if c.op in REDUCTIONS and not c.p2p and not c.by] for r in evidence.ranks}
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
    padded, passes = _padded(evidence)
    problems = padded + _mean_of_means(evidence)
    if problems:
        return found(*problems)
    return passed("; ".join(passes) if passes else
                  "no padded evaluation shard is reduced, and no per-rank mean over unequal "
                  "shards is averaged")


FIX_METRIC = """\
sums = torch.tensor([correct, count], dtype=torch.float64, device=device)
dist.all_reduce(sums)  # the sums and the counts, not each rank's mean
accuracy = (sums[0] / sums[1]).item()
# and an unpadded shard: Subset(val_set, range(rank, len(val_set), world_size))"""


METRIC_MEAN_OF_MEANS = Check(
    "metric-mean-of-means", "error",
    "an evaluation metric is reduced from sums and counts, over unpadded shards",
    "training-loop-evaluation",
    FIX_METRIC, metric_mean_of_means, also=("advisory",))
