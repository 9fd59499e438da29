"""``metric-mean-of-means``: an evaluation metric averaged over ranks whose shards differ, or
an evaluation sampler that pads its last shard with repeated samples.

Two signals, both from the run: a DistributedSampler in an evaluation pass (no backward) with
``drop_last=False`` and a dataset that the world size does not divide (the padding repeats
samples, and a reduction follows); and a reduction of one non-integral number per rank (a
rank's mean) with ``SUM`` or ``AVG`` after evaluation passes that gave the ranks different
numbers of samples, with no count reduced beside it.
"""

from __future__ import annotations

from ddplab.doctor.judging.findings import place
from ddplab.doctor.judging.judgement import Draft, found, not_applicable, number, passed, spot

REDUCTIONS = ("all_reduce", "reduce")


def _padded(evidence) -> list:
    evaluation = {(p["loader"], p["number"]): p for p in evidence.records("pass")
                  if not p["training"] and p["exhausted"]}  # not a peek at one batch
    later = [c for c in evidence.records("collective") if not c["p2p"]]
    drafts = []
    for order in evidence.records("sampler_order"):
        key = (order["loader"], order["pass_number"])
        size, replicas = order["dataset_len"], order["num_replicas"]
        if (key not in evaluation or order["drop_last"] or not size or size % replicas == 0
                or not any(c["t"] > order["t"] for c in later)):
            continue
        extra = order["total_size"] - size
        loader = evidence.loader(order["loader"]) or {}
        reduced = next(c for c in later if c["t"] > order["t"])
        drafts.append(Draft(
            f"the evaluation DistributedSampler of the DataLoader made at "
            f"{place(*spot(loader))} splits {size} samples over {replicas} ranks and pads "
            f"them to {order['total_size']}: {extra} sample{'s are' if extra > 1 else ' is'} "
            f"evaluated twice, and the {reduced['op']} at {place(*spot(reduced))} counts "
            f"{'them' if extra > 1 else 'it'} twice in the metric",
            {"dataset_len": size, "num_replicas": replicas, "padded_to": order["total_size"],
             "repeated": extra}, *spot(evaluation[key])))
        break
    return drafts


def _mean_of_means(evidence) -> list:
    per_rank = {r: [c for c in evidence.records("collective", r)
                    if c["op"] in REDUCTIONS and not c["p2p"]] for r in evidence.ranks}
    if not per_rank or len({len(v) for v in per_rank.values()}) != 1:
        return []
    drafts = []
    for i, c in enumerate(per_rank[evidence.ranks[0]]):
        at = {r: calls[i] for r, calls in per_rank.items()}
        counts = {r: a["eval_samples"] for r, a in at.items()}
        values = {r: (a["before"] or [None])[0] for r, a in at.items()}
        if (c["numel"] != 1 or not str(c["dtype"]).startswith(("float", "bfloat"))
                or c["reduce"] not in ("SUM", "AVG") or min(counts.values()) == 0
                or len(set(counts.values())) == 1 or None in values.values()
                or all(float(v).is_integer() for v in values.values())):
            continue
        window = [per_rank[r][j] for r in per_rank for j in (i - 1, i + 1)
                  if 0 <= j < len(per_rank[r])]
        if any(w["numel"] and w["numel"] > 1 or (w["before"] or [None])[0] in counts.values()
               for w in window):
            continue  # the counts (or sums and counts together) are reduced too
        total = sum(counts.values())
        weighted = sum(values[r] * counts[r] for r in counts) / total
        plain = sum(values.values()) / len(values)
        drafts.append(Draft(
            f"{c['op']}({c['reduce']}) at {place(*spot(c))} combines one mean per rank ("
            + ", ".join(f"rank {r}: {number(values[r])} over {counts[r]} samples"
                        for r in sorted(counts))
            + f"): the mean of the ranks' means is {number(plain)}, the mean over all "
              f"{total} samples {number(weighted)}: ranks with fewer samples weigh more",
            {"values": values, "samples": counts, "mean_of_means": plain,
             "sample_mean": weighted}, *spot(c)))
        break
    return drafts


def metric_mean_of_means(evidence, so_far):
    evaluated = [p for p in evidence.records("pass") if not p["training"] and p["exhausted"]]
    if not evaluated:
        return not_applicable("no evaluation pass over a DataLoader (a whole pass without "
                              "backward)")
    drafts = _padded(evidence) + _mean_of_means(evidence)
    if drafts:
        return found(*drafts)
    return passed("no padded evaluation shard is reduced, and no per-rank mean over unequal "
                  "shards is averaged")
