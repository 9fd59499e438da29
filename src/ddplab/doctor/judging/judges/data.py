"""Data checks: ``sampler-set-epoch`` (a DistributedSampler's order, or a sampler's of the
script's own class that has ``set_epoch``), ``no-distributed-sampler``, ``uneven-inputs``."""

from __future__ import annotations

import ddplab.doctor.records as records
from ddplab.doctor.judging.check import ANY_CRASH, Check
from ddplab.doctor.judging.findings import place
from ddplab.doctor.judging.judgement import (
    Problem,
    file_line,
    found,
    not_applicable,
    not_judged,
    passed,
    ranks_text,
)


def _custom_orders(evidence, training) -> tuple[list, list]:
    """(problems, samplers judged) of the samplers of the script's own classes: one that gave
    the same first indices in two training epochs whose ``set_epoch`` differed ignores the
    epoch. A sampler never given two epochs is not judged (its order may be meant to stay)."""
    distributed = {o.sampler for o in evidence.records(records.SamplerOrder)}
    orders = {}
    for order in evidence.records(records.CustomOrder):
        if (order.loader, order.pass_number) in training and order.sampler not in distributed:
            orders.setdefault(order.sampler, []).append(order)
    problems, judged = [], []
    for sampler_orders in orders.values():
        pairs = [(a, b) for a, b in zip(sampler_orders, sampler_orders[1:])
                 if a.epoch is not None and b.epoch is not None and a.epoch != b.epoch]
        if not pairs:
            continue
        judged.append(sampler_orders[0].type)
        same = next(((a, b) for a, b in pairs if a.digest == b.digest), None)
        if same is None:
            continue
        first, second = same
        call = next((c for c in evidence.records(records.SetEpoch)
                     if c.sampler == first.sampler and c.epoch == second.epoch), None)
        loader = evidence.loader(first.loader)
        problems.append(Problem(
            f"the {first.type} of the DataLoader made at "
            f"{place(*file_line(loader)) if loader else '?'} gave the same order in epochs "
            f"{first.epoch} and {second.epoch} (first indices "
            f"{', '.join(map(str, first.first[:6]))}, ... in both, the first "
            f"{len(first.first)} the same), though set_epoch({second.epoch}) was called"
            + (f" at {place(*file_line(call))}" if call else "")
            + f": its __iter__ at {place(first.iter_file, first.iter_line)} does not use the "
              "epoch, so every epoch repeats one order",
            {"epochs": [first.epoch, second.epoch], "first_indices": [first.first, second.first],
             "sampler": first.type, "compared": len(first.first)},
            first.iter_file, first.iter_line, fix=FIX_CUSTOM_EPOCH))
    return problems, judged


def sampler_set_epoch(evidence, earlier):
    """A shuffling DistributedSampler that gave the same order in two training epochs, or a
    sampler of the script's own that gave the same order for two epochs set by set_epoch."""
    training = {(p.loader, p.number): p for p in evidence.training_passes()}
    custom, judged = _custom_orders(evidence, training)
    orders = {}
    for order in evidence.records(records.SamplerOrder):
        if order.shuffle and (order.loader, order.pass_number) in training:
            orders.setdefault(order.sampler, []).append(order)
    seen = [o for o in orders.values() if len(o) >= 2]
    if not seen and not judged:
        if orders:
            return not_judged("one training epoch ran: the sampler's orders in two epochs are "
                              "needed (run the script for two epochs or more)")
        return not_applicable("no shuffling DistributedSampler was iterated for two training "
                              "epochs")
    problems = custom
    for sampler_orders in seen:
        first, second = sampler_orders[0], sampler_orders[1]
        if first.digest != second.digest:
            continue
        calls = [c for c in evidence.records(records.SetEpoch) if c.sampler == first.sampler]
        loader = evidence.loader(first.loader)
        where_made = place(*file_line(loader)) if loader else "?"
        why = ("set_epoch is never called" if not calls else
               f"set_epoch({calls[-1].epoch}) at {place(*file_line(calls[-1]))} sets the same "
               f"epoch each time" if len({c.epoch for c in calls}) == 1 else
               "set_epoch is called after the loader's iterator was made")
        second_pass = training[(second.loader, second.pass_number)]
        spot = file_line(calls[0]) if calls else file_line(second_pass)
        problems.append(Problem(
            f"the DistributedSampler of the DataLoader made at {where_made} gave the same "
            f"order in two epochs (epoch={first.epoch} both times; first indices "
            f"{', '.join(map(str, first.first[:6]))}, ... in both): {why}, so every epoch "
            f"repeats one shuffle",
            {"epochs": [first.epoch, second.epoch], "first_indices": [
                first.first, second.first], "seed": first.seed,
             "num_replicas": first.num_replicas, "dataset_len": first.dataset_len,
             "set_epoch_calls": [{"epoch": c.epoch, "line": c.line} for c in calls]},
            *spot))
    if not problems:
        return passed(" and ".join(
            (["the DistributedSampler's order changed between training epochs (set_epoch was "
              "called)"] if seen else [])
            + [f"the {name}'s order changed with the epoch set_epoch gave" for name in judged]))
    return found(*problems)


def no_distributed_sampler(evidence, earlier):
    """A training DataLoader without a distributed sampler whose data is the same on every
    rank: each rank goes through the whole dataset every epoch."""
    if (evidence.world_size or 0) < 2:
        return not_applicable("one rank")
    used = sorted({p.loader for p in evidence.training_passes()})
    if not used:
        return not_applicable("no DataLoader was used for training")
    problems, sharded, unrecorded = [], [], []
    for index in used:
        loaders = {r: evidence.loader(index, r) for r in evidence.ranks}
        if any(d is None for d in loaders.values()):
            made = next((d for d in loaders.values() if d is not None), None)
            unrecorded.append(
                (f"the DataLoader made at {place(*file_line(made))}" if made else
                 f"training DataLoader {index}") + " was not recorded on "
                + ranks_text(r for r, d in loaders.items() if d is None) + ": not compared")
            continue
        first = loaders[evidence.ranks[0]]
        if first.distributed:
            sharded.append(index)
            continue
        same_data = len({d.fingerprint for d in loaders.values()}) == 1
        whole = (first.iterable or first.sampler_len == first.dataset_len)
        firsts = {r: next((p.first for p in evidence.training_passes(r)
                           if p.loader == index), None) for r in evidence.ranks}
        same_first = len(set(firsts.values())) == 1 and None not in firsts.values()
        if first.iterable and not same_first:
            sharded.append(index)
            continue
        if not (same_data and whole):
            sharded.append(index)
            continue
        drawn = (f"draws all {first.dataset_len} samples" if first.dataset_len is not None
                 else f"reads the whole {first.dataset} (an IterableDataset that does not "
                      "split itself by rank)")
        problems.append(Problem(
            f"the DataLoader made at {place(*file_line(first))} has no DistributedSampler: each of "
            f"the {len(loaders)} ranks {drawn} every epoch"
            + (" in the same order (identical first batches)" if same_first else
               " (in its own random order)")
            + f", so an epoch is {len(loaders)}x the dataset and the ranks repeat each "
              "other's work",
            {"sampler": first.sampler, "dataset_len": first.dataset_len,
             "samples_per_rank_per_epoch": first.sampler_len,
             "same_first_batch": same_first}, *file_line(first)))
    if problems:
        return found(*problems)
    if not sharded:
        return not_applicable("; ".join(unrecorded))
    made = ", ".join(place(*file_line(evidence.loader(i))) for i in sharded)
    return passed(f"each training DataLoader is sharded between the ranks (the DataLoader made "
                  f"at {made}); overlapping-shards compares the shards"
                  + "".join(f"; {text}" for text in unrecorded))


def _counted(evidence, rank) -> dict:
    """loader -> the IterableCount of its dataset's whole epoch, where the doctor's own pass
    ended and began with the batch the training began with."""
    return {c.loader: c for c in evidence.records(records.IterableCount, rank)
            if c.complete and c.same_start}


def uneven_inputs(evidence, earlier):
    """Training loaders whose number of batches differs between ranks: their ``len()``, or
    for an IterableDataset the batches of a whole epoch the doctor counted after the
    script."""
    if (evidence.world_size or 0) < 2:
        return not_applicable("one rank")
    lengths, items = {}, {}
    for rank in evidence.ranks:
        counted = _counted(evidence, rank)
        for p in evidence.training_passes(rank):
            size = p.len if p.len is not None else (p.batches if p.exhausted
                                                          else None)
            if p.loader in counted:
                size = counted[p.loader].batches
                items.setdefault(p.loader, {})[rank] = counted[p.loader].items
            if size is not None:
                lengths.setdefault(p.loader, {}).setdefault(rank, size)
    if not lengths:
        return not_applicable("no training DataLoader with a length (an IterableDataset's "
                              "epoch is counted where its loader has no workers)")
    problems = []
    for index, per_rank in sorted(lengths.items()):
        if len(set(per_rank.values())) > 1:
            loader = evidence.loader(index)
            short = min(per_rank.values())
            longer = [r for r, n in per_rank.items() if n > short]
            counted = items.get(index)
            problems.append(Problem(
                f"the DataLoader made at {place(*file_line(loader))} gives "
                + ", ".join(f"rank {r} {n} batches" for r, n in sorted(per_rank.items()))
                + " per epoch"
                + (f" (its {loader.dataset}, iterated to its end by the doctor after the script, "
                   "gave " + ", ".join(f"rank {r} {n}" for r, n in sorted(counted.items()))
                   + " items)" if counted else "")
                + f": at batch {short + 1}, {ranks_text(longer)} "
                  f"run{'s' if len(longer) == 1 else ''} a backward whose gradient all-reduce "
                  "the other ranks never join, so the job hangs there or pairs it with a "
                  "different collective",
                {"batches_per_rank": per_rank, **({"items_per_rank": counted}
                                                  if counted else {})}, *file_line(loader)))
    if problems:
        return found(*problems)
    streams = [f"{sorted(per_rank.values())[0]} batches on each rank" for index, per_rank in
               sorted(lengths.items()) if index in items]
    return passed("every rank's training loader has the same number of batches"
                  + (f" (an IterableDataset's epoch, counted to its end: {', '.join(streams)})"
                     if streams else ""))


FIX_SET_EPOCH = """\
for epoch in range(num_epochs):
    # before iterating: a new order each epoch, the same on all ranks
    sampler.set_epoch(epoch)
    for x, y in loader:
        ..."""


FIX_CUSTOM_EPOCH = """\
def set_epoch(self, epoch):
    self.epoch = epoch

def __iter__(self):  # drawn from the seed and the epoch: the same order on every rank
    g = torch.Generator().manual_seed(self.seed + self.epoch)
    order = torch.randperm(len(self.dataset), generator=g).tolist()
    return iter(order[self.rank::self.num_replicas])"""


FIX_SAMPLER = """\
sampler = DistributedSampler(dataset)  # each rank: len(dataset) / world_size samples
# the sampler shuffles: no shuffle=True here
loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)"""


FIX_UNEVEN = """\
# a DistributedSampler gives every rank as many samples: by default (drop_last=False) it
# pads by repeating the first samples of the epoch's order, which then count twice;
# drop_last=True leaves len(dataset) % world_size samples out of each epoch instead
sampler = DistributedSampler(dataset)
# or keep unequal shards and let DDP shadow the missing all-reduces:
with model.join():
    for x, y in loader:
        ..."""


SAMPLER_SET_EPOCH = Check(
    "sampler-set-epoch", "error",
    "a shuffling DistributedSampler gives a new order in each training epoch",
    "sharding-shuffling",
    FIX_SET_EPOCH, sampler_set_epoch)


NO_DISTRIBUTED_SAMPLER = Check(
    "no-distributed-sampler", "error",
    "each rank trains on its own shard, not on the whole dataset",
    "sharding-no-sampler",
    FIX_SAMPLER, no_distributed_sampler)


UNEVEN_INPUTS = Check(
    "uneven-inputs", "error",
    "every rank's training loader has the same number of batches",
    "hangs-uneven",
    FIX_UNEVEN, uneven_inputs, explains_hang=True, explains=ANY_CRASH)
