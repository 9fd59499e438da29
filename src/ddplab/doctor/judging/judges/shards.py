"""The data each rank trains on, compared across ranks: ``different-datasets`` (a sharded
training loader over a dataset whose contents differ by rank), ``same-batches`` (every rank's
DDP forward gets byte-identical batches) and ``overlapping-shards`` (DistributedSamplers whose
shards share samples within an epoch).

Both are proved from this run: the digest of each DDP forward's first input on every rank, and
the indices each sampler gave each rank. A DistributedSampler that pads its last shard repeats
up to ``world_size - 1`` samples by design: only more shared samples than that are an
overlap.
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
    passed,
)

SHOWN = 6


def _forward_digests(evidence, rank) -> list:
    """(step, micro-step, digest) of each training DDP forward this rank recorded."""
    return [(s.number, i, m.digest) for s in evidence.records(records.Step, rank)
            for i, m in enumerate(s.micro) if m.digest]


# fingerprints made from the data itself (ranks/watch/data.py): a TensorDataset's, a Subset's,
# and a dataset's of the script's own that holds either
CONTENT = ("tensors:", "subset:", "holds:")


def different_datasets(evidence, earlier):
    """A DistributedSampler splits one dataset between the ranks by index: if each rank built
    a different dataset (an unseeded split or shuffle), the shards are slices of different
    sets."""
    if (evidence.world_size or 0) < 2:
        return not_applicable("one rank")
    used = sorted({p.loader for p in evidence.training_passes()})
    compared = 0
    for index in used:
        loaders = {r: evidence.loader(index, r) for r in evidence.ranks}
        if any(d is None for d in loaders.values()) or not loaders[evidence.ranks[0]].distributed:
            continue
        prints = {r: d.fingerprint for r, d in loaders.items()}
        if not all(p.startswith(CONTENT) for p in prints.values()):
            continue
        compared += 1
        if len(set(prints.values())) == 1:
            continue
        made = loaders[evidence.ranks[0]]
        kind = prints[evidence.ranks[0]].split(":")[0]
        return found(Problem(
            f"the DataLoader made at {place(*file_line(made))} shards a "
            f"{made.dataset} of {made.dataset_len} samples whose contents differ by rank ("
            + ", ".join(f"rank {r}: {p.split(':')[1]}" for r, p in sorted(prints.items()))
            + {"subset": ", the digests of the indices each rank's Subset took",
               "holds": f", the digests of the Subsets or TensorDatasets each rank's "
                        f"{made.dataset} holds: a split made inside it"}.get(
                kind, ", the digests of each rank's tensors")
            + "): the DistributedSampler splits indices, so each rank's shard is a slice of "
              "a different set, and one rank may train on another's validation samples",
            {"fingerprints": prints, "dataset_len": made.dataset_len}, *file_line(made),
            fix=FIX_ONE_SPLIT))
    if not compared:
        return not_applicable("no sharded training loader over a TensorDataset or a Subset, "
                              "or a dataset that holds one (the datasets the doctor can "
                              "compare without reading samples)")
    return passed("every rank's sharded training loader holds the same dataset")


FIX_ONE_SPLIT = """\
# the same split on every rank: a fixed seed (or split once, save, and load it)
generator = torch.Generator().manual_seed(0)
train_set, val_set = random_split(dataset, [0.8, 0.2], generator=generator)"""


def same_batches(evidence, earlier):
    """Batches one rank trained on that another rank trained on too, byte for byte: in the
    same step (the same seed, the same draws), or some steps apart (one rank drew more random
    numbers than the others, rank 0's evaluation, and runs ahead on the same stream)."""
    if (evidence.world_size or 0) < 2:
        return not_applicable("one rank")
    if earlier.found("no-distributed-sampler"):
        return not_applicable("explained by no-distributed-sampler")
    per_rank = {r: _forward_digests(evidence, r) for r in evidence.ranks}
    compared = min((len(v) for v in per_rank.values()), default=0)
    if compared < 1 or len(per_rank) < 2:
        return not_applicable("no DDP forward before an optimizer step on every rank")
    base = evidence.ranks[0]
    seen = {d for _, _, d in per_rank[base]}
    aligned = {(s, i): d for s, i, d in per_rank[base]}
    shared = {r: [d for _, _, d in v if d in seen] for r, v in per_rank.items() if r != base}
    alike = {r: sum(aligned.get((s, i)) == d for s, i, d in v)
             for r, v in per_rank.items() if r != base}
    least = min(len(v) for v in shared.values())
    if least < 1 or least * 2 < compared:
        return passed(f"the ranks' batches differ ({compared} forwards compared on each rank)")
    seeds = {r: evidence.records(records.Seed, r) for r in evidence.ranks}
    first_seeds = {r: s[0] for r, s in seeds.items() if s}
    seed = (first_seeds[base] if len(first_seeds) == len(evidence.ranks)
            and len({s.seed for s in first_seeds.values()}) == 1 else None)
    step = evidence.records(records.Step)[0]
    other = min(shared, key=lambda r: len(shared[r]))
    digest = shared[other][0]
    return found(Problem(
        f"of the {len(per_rank[other])} batch{'es' * (len(per_rank[other]) > 1)} rank "
        f"{other} trained on, {len(shared[other])} "
        f"{'are' if len(shared[other]) > 1 else 'is'} byte-identical to batches rank {base} "
        "trained on ("
        + ("all in the same step" if alike[other] == len(shared[other]) else
           f"{alike[other]} in the same step, the rest some steps apart")
        + f"; digest {digest} on both)"
        + (f", after torch.manual_seed({seed.seed}) at {place(*file_line(seed))} on every rank"
           if seed else "")
        + f": the {len(evidence.ranks)} ranks repeat each other's batches, so the data seen "
          "per step is one rank's and the other ranks' work is wasted",
        {"forwards_compared": compared, "shared": {r: len(v) for r, v in shared.items()},
         "same_step": alike, "digest": digest, "seed": seed.seed if seed else None},
        *(file_line(seed) if seed else file_line(step)), fix=FIX_SEED if seed else None))


FIX_SEED = """\
# batches drawn at random (torch.randint) need a different stream on each rank
torch.manual_seed(seed + dist.get_rank())
# or a DistributedSampler, which splits one shuffle between the ranks"""


def overlapping_shards(evidence, earlier):
    if (evidence.world_size or 0) < 2:
        return not_applicable("one rank")
    training = {(p.loader, p.number) for p in evidence.training_passes()}
    by_pass = {}
    for rank in evidence.ranks:
        for o in evidence.records(records.SamplerOrder, rank):
            if (o.loader, o.pass_number) in training and o.indices is not None:
                by_pass.setdefault((o.loader, o.pass_number), {})[rank] = o
    compared = {k: v for k, v in by_pass.items() if len(v) == len(evidence.ranks)}
    if not compared:
        return not_applicable("no training DistributedSampler whose indices every rank "
                              "recorded")
    for (loader, _), orders in sorted(compared.items(), key=lambda kv: str(kv[0])):
        sets = {r: set(o.indices) for r, o in orders.items()}
        first = orders[evidence.ranks[0]]
        padding = first.total_size - (first.dataset_len or 0) if not first.drop_last else 0
        shared = set()
        ranks = sorted(sets)
        for i, a in enumerate(ranks):
            for b in ranks[i + 1:]:
                shared |= sets[a] & sets[b]
        if len(shared) <= padding:
            continue
        seen = set().union(*sets.values())
        unseen = (first.dataset_len or 0) - len(seen)
        seeds = {r: o.seed for r, o in orders.items()}
        made = evidence.loader(loader) or None
        listed = ", ".join(f"rank {r}: {s}" for r, s in sorted(seeds.items()))
        why = (f"the samplers' seeds differ by rank ({listed})" if len(set(seeds.values())) > 1
               else "the ranks' samplers do not split one order")
        return found(Problem(
            f"in epoch {first.epoch} the DistributedSampler"
            + (f" of the DataLoader made at {place(*file_line(made))}" if made else "")
            + f" gave the ranks {len(shared)} samples in common (e.g. "
            + ", ".join(map(str, sorted(shared)[:SHOWN]))
            + f") and {unseen} of the {first.dataset_len} samples to no rank: {why}, so each "
              "rank shuffles its own permutation and takes its slice of it",
            {"epoch": first.epoch, "shared": len(shared), "unseen": unseen,
             "examples": sorted(shared)[:SHOWN], "seeds": seeds,
             "dataset_len": first.dataset_len}, *(file_line(made) if made else (None, None)),
            fix=FIX_SAME_SEED))
    return passed(f"in {len(compared)} training pass{'es' if len(compared) > 1 else ''}, the "
                  "ranks' DistributedSampler shards share no sample beyond the padding")


FIX_SAME_SEED = """\
# the same seed on every rank: one permutation, split between the ranks
sampler = DistributedSampler(dataset, shuffle=True, seed=seed)
for epoch in range(num_epochs):
    sampler.set_epoch(epoch)"""


DIFFERENT_DATASETS = Check(
    "different-datasets", "error",
    "a sharded training loader holds the same dataset on every rank",
    "sharding-no-sampler",
    FIX_ONE_SPLIT, different_datasets)


OVERLAPPING_SHARDS = Check(
    "overlapping-shards", "error",
    "within an epoch, the ranks' DistributedSampler shards share no sample beyond the "
    "padding",
    "sharding-shuffling",
    FIX_SAME_SEED, overlapping_shards)


SAME_BATCHES = Check(
    "same-batches", "error",
    "the ranks' DDP forwards get different batches",
    "sharding-no-sampler",
    FIX_SEED, same_batches, defers_to=('no-distributed-sampler',))
