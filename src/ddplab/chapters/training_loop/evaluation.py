"""A metric that is not a sum (AUC) over a validation set sharded without padding.

    python -m ddplab gather-metric --world-size 3 --dataset-size 10 --json

AUC (the chance that a positive scores above a negative) needs every prediction at once: the
average of the ranks' AUCs is not the AUC. Rank r scores samples r, r + W, r + 2W, ... (as
``DistributedSampler(shuffle=False)`` orders them, without its padding), so when W does not
divide D the last ranks hold one prediction fewer, and ``all_gather``, which wants equal
shapes, raises on gloo ("ProcessGroupGloo::allgather: invalid tensor size"). Two ways that
work, both run here:

- ``gather_unequal``: all-gather the sizes, pad to the largest, all-gather, trim each;
- ``dist.all_gather_object``: pickles any object; simpler, slower for large tensors.

``DistributedSampler(drop_last=False)`` instead pads: it repeats the first samples until every
rank has ceil(D / W) (``DistributedSampler.__iter__``, ``torch/utils/data/distributed.py``),
and the gathered metric counts those samples twice. Gathered and cut to D, they drop out only
in the sampler's order (position i on rank i % W): ``gather_in_sampler_order`` interleaves the
ranks before the cut; ``gather_cut`` runs it beside the rank-by-rank cut, which keeps a repeat
and loses a sample once two or more positions are padded.
"""

from __future__ import annotations

import dataclasses
import textwrap

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

import ddplab
from ddplab.common.checks import a_bool, an_int, int_in_range, positive_int
from ddplab.common.results import Result

COMMAND = "gather-metric"  # python -m ddplab gather-metric


def gather_unequal(t: torch.Tensor) -> torch.Tensor:
    """All-gather 1-D tensors of different lengths: pad to the longest, gather, trim."""
    size = torch.tensor([len(t)], device=t.device)  # NCCL gathers only tensors on its GPU
    sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, size)
    longest = int(max(sizes))
    padded = torch.cat([t, t.new_zeros(longest - len(t))])
    out = [torch.zeros_like(padded) for _ in sizes]
    dist.all_gather(out, padded)
    return torch.cat([o[:int(n)] for o, n in zip(out, sizes)])


def gather_in_sampler_order(t: torch.Tensor, dataset_size: int) -> torch.Tensor:
    """All-gather what each rank computed for its ``DistributedSampler(drop_last=False)``
    samples, back in the sampler's order, its padding cut off. Position i of the sampler's
    list went to rank i % world_size, so interleave the ranks' rows before cutting: rank
    after rank, the cut keeps a repeated sample and drops a real one."""
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)  # equal shapes: the sampler gives every rank ceil(D / W) samples
    return torch.stack(out, dim=1).flatten(0, 1)[:dataset_size]


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(a positive's score > a negative's), ties counted half."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def validation_set(size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores, labels): a fixed model's scores, noisy, of ``size`` labelled samples."""
    g = np.random.default_rng(seed)
    labels = (np.arange(size) % 2).astype(np.int64)
    g.shuffle(labels)
    return labels + 1.5 * g.standard_normal(size), labels


# ---------------------------------------------------------------- on every rank


def evaluate(ctx, dataset_size: int, seed: int) -> dict:
    """Score this rank's shard, then gather every rank's predictions three ways."""
    scores, labels = validation_set(dataset_size, seed)
    mine = np.arange(ctx.rank, dataset_size, ctx.world_size)  # no padding
    s, y = (torch.from_numpy(a[mine]).to(ctx.device) for a in (scores, labels))
    gathered_s, gathered_y = gather_unequal(s), gather_unequal(y)
    objects = [None] * ctx.world_size
    dist.all_gather_object(objects, (scores[mine], labels[mine]))
    padded = list(DistributedSampler(range(dataset_size), num_replicas=ctx.world_size,
                                     rank=ctx.rank, shuffle=False))
    ps, py = (torch.from_numpy(a[padded]).to(ctx.device) for a in (scores, labels))
    out_s = [torch.zeros_like(ps) for _ in range(ctx.world_size)]
    out_y = [torch.zeros_like(py) for _ in range(ctx.world_size)]
    dist.all_gather(out_s, ps)
    dist.all_gather(out_y, py)
    return {"count": len(mine), "local_auc": auc(scores[mine], labels[mine]),
            "auc": auc(gathered_s.cpu().numpy(), gathered_y.cpu().numpy()),
            "auc_object": auc(np.concatenate([o[0] for o in objects]),
                              np.concatenate([o[1] for o in objects])),
            "auc_padded": auc(torch.cat(out_s).cpu().numpy(), torch.cat(out_y).cpu().numpy()),
            "padded_count": len(padded)}


def gather_then_cut(ctx, dataset_size: int, seed: int, shuffle: bool) -> dict:
    """Score this rank's ``DistributedSampler`` samples (padded), gather the sample indices
    and the scores, then cut to ``dataset_size`` two ways: rank after rank, and interleaved."""
    scores, labels = validation_set(dataset_size, seed)
    sampler = DistributedSampler(range(dataset_size), num_replicas=ctx.world_size,
                                 rank=ctx.rank, shuffle=shuffle, seed=seed)
    mine = torch.tensor(list(sampler), device=ctx.device)
    out = [torch.empty_like(mine) for _ in range(ctx.world_size)]
    dist.all_gather(out, mine)
    rank_by_rank = torch.cat(out)[:dataset_size].cpu().numpy()  # the cut that goes wrong
    interleaved = gather_in_sampler_order(mine, dataset_size).cpu().numpy()
    s = gather_in_sampler_order(torch.from_numpy(scores).to(ctx.device)[mine], dataset_size)
    y = gather_in_sampler_order(torch.from_numpy(labels).to(ctx.device)[mine], dataset_size)
    return {"samples": mine.cpu().tolist(), "rank_by_rank": rank_by_rank.tolist(),
            "interleaved": interleaved.tolist(),
            "auc_rank_by_rank": auc(scores[rank_by_rank], labels[rank_by_rank]),
            "auc_interleaved": auc(s.cpu().numpy(), y.cpu().numpy())}


def gather_equal_only(ctx, dataset_size: int) -> dict:
    """``all_gather`` of unequal shards as if they were equal: raises on gloo."""
    mine = torch.arange(ctx.rank, dataset_size, ctx.world_size, dtype=torch.float64,
                        device=ctx.device)
    out = [mine.new_zeros(len(range(0, dataset_size, ctx.world_size)))
           for _ in range(ctx.world_size)]
    dist.all_gather(out, mine)
    return {"count": len(mine)}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class GatherMetric(Result):
    world_size: int
    dataset_size: int
    metric_one_process: float
    metric_gathered: float  # pad-and-trim all_gather, on rank 0
    metric_all_gather_object: float
    metric_mean_of_ranks: float  # each rank's own AUC, averaged: wrong
    metric_padded_sampler: float  # DistributedSampler's padding, gathered
    predictions_per_rank: list[int]
    padded_predictions: int  # what the padded sampler gathers in all

    def summary(self) -> str:
        """Two lines for a panel: the shards, then the AUCs that differ."""
        return (f"{self.dataset_size} samples on {self.world_size} ranks: "
                f"{self.predictions_per_rank} predictions\n"
                f"AUC: one process {self.metric_one_process:.4f}, gathered "
                f"{self.metric_gathered:.4f}, padded sampler {self.metric_padded_sampler:.4f} "
                f"({self.padded_predictions} predictions)")

    def describe(self) -> str:
        return "\n".join([
            f"{self.dataset_size} samples on {self.world_size} ranks: "
            f"{self.predictions_per_rank} predictions",
            f"AUC, one process:                  {self.metric_one_process:.6f}",
            f"AUC, gathered (pad and trim):      {self.metric_gathered:.6f}",
            f"AUC, gathered (all_gather_object): {self.metric_all_gather_object:.6f}",
            f"mean of each rank's AUC:           {self.metric_mean_of_ranks:.6f}",
            f"AUC, DistributedSampler padding:   {self.metric_padded_sampler:.6f} "
            f"({self.padded_predictions} predictions)"])


def _check_sizes(world_size: int, dataset_size: int, seed: int) -> None:
    """Bad input refused before any rank starts: every rank needs at least two samples."""
    int_in_range("world_size", world_size, 1, 64)
    positive_int("dataset_size", dataset_size)
    an_int("seed", seed)
    if dataset_size < 2 * world_size:
        raise ValueError(f"dataset_size must be at least 2 * world_size ({2 * world_size}), "
                         f"got {dataset_size}")


def run(world_size: int = 3, dataset_size: int = 10, seed: int = 0,
        timeout: float = 60.0) -> GatherMetric:
    _check_sizes(world_size, dataset_size, seed)
    results = ddplab.run(evaluate, world_size, timeout=timeout,
                         dataset_size=dataset_size, seed=seed)
    scores, labels = validation_set(dataset_size, seed)
    return GatherMetric.from_ranks(
        results,
        world_size=world_size, dataset_size=dataset_size,
        metric_one_process=auc(scores, labels), metric_gathered=results[0]["auc"],
        metric_all_gather_object=results[0]["auc_object"],
        metric_mean_of_ranks=float(np.nanmean([r["local_auc"] for r in results])),
        metric_padded_sampler=results[0]["auc_padded"],
        predictions_per_rank=[r["count"] for r in results],
        padded_predictions=world_size * results[0]["padded_count"])


def unequal_all_gather_error(world_size: int = 3, dataset_size: int = 10,
                             timeout: float = 60.0) -> str:
    """The message of a plain ``all_gather`` of unequal shards (a rank's RankError)."""
    try:
        ddplab.run(gather_equal_only, world_size, timeout=timeout, dataset_size=dataset_size)
    except ddplab.RankError as exc:
        text = exc.remote_traceback or str(exc)
        return next(line.split("Error: ", 1)[1] for line in reversed(text.splitlines())
                    if "invalid tensor size" in line)
    raise AssertionError("all_gather of unequal shards did not raise")


@dataclasses.dataclass
class GatherThenCut(Result):
    world_size: int
    dataset_size: int
    shuffle: bool
    samples_per_rank: list[list[int]]  # the sampler's indices, padding included
    kept_rank_by_rank: list[int]  # all_gather, torch.cat, cut to dataset_size
    kept_interleaved: list[int]  # gather_in_sampler_order
    metric_one_process: float
    metric_rank_by_rank: float
    metric_interleaved: float

    @property
    def repeated(self) -> list[int]:
        """Samples the rank-by-rank cut keeps twice."""
        kept = self.kept_rank_by_rank
        return sorted({i for i in kept if kept.count(i) > 1})

    @property
    def missing(self) -> list[int]:
        """Samples the rank-by-rank cut drops."""
        return sorted(set(range(self.dataset_size)) - set(self.kept_rank_by_rank))

    json_extras = ("repeated", "missing")

    def describe(self) -> str:
        ranks = "  ".join(f"rank {r}: {s}" for r, s in enumerate(self.samples_per_rank))
        return "\n".join([
            f"{self.dataset_size} samples on {self.world_size} ranks, DistributedSampler "
            f"(shuffle={self.shuffle}, drop_last=False)",
            textwrap.fill(ranks, 98, subsequent_indent="  "),
            f"rank by rank, cut:  {self.kept_rank_by_rank}",
            f"  twice: {self.repeated}, missing: {self.missing}",
            f"interleaved, cut:   {self.kept_interleaved}",
            f"AUC: one process {self.metric_one_process:.6f}, rank by rank "
            f"{self.metric_rank_by_rank:.6f}, interleaved {self.metric_interleaved:.6f}"])


def gather_cut(world_size: int = 4, dataset_size: int = 10, seed: int = 0,
               shuffle: bool = False, timeout: float = 60.0) -> GatherThenCut:
    """A padded sampler's predictions gathered and cut to ``dataset_size``, rank by rank and
    interleaved, against one process's AUC."""
    _check_sizes(world_size, dataset_size, seed)
    a_bool("shuffle", shuffle)
    results = ddplab.run(gather_then_cut, world_size, timeout=timeout,
                         dataset_size=dataset_size, seed=seed, shuffle=shuffle)
    scores, labels = validation_set(dataset_size, seed)
    first = results[0]
    return GatherThenCut.from_ranks(
        results, world_size=world_size, dataset_size=dataset_size, shuffle=shuffle,
        samples_per_rank=[r["samples"] for r in results],
        kept_rank_by_rank=first["rank_by_rank"], kept_interleaved=first["interleaved"],
        metric_one_process=auc(scores, labels), metric_rank_by_rank=first["auc_rank_by_rank"],
        metric_interleaved=first["auc_interleaved"])


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--dataset-size", type=int, default=10, help="validation samples")
    parser.add_argument("--seed", type=int, default=0)
