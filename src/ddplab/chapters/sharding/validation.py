"""Validation on several ranks: what DistributedSampler's padding does to a metric, and an
exact alternative.

A fixed classifier is evaluated on ``N`` samples by ``world_size`` ranks three ways: through a
``DistributedSampler`` (which pads by repeating samples), through one with ``drop_last=True``
(which skips the tail), and through unpadded shards ``range(rank, N, world_size)``. Each rank
counts its correct predictions and its samples, and the counts are all-reduced as sums. The
padded count includes the repeated samples (pytorch#25162); the unpadded one is the accuracy
one process computes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

import ddplab
from ddplab.common.checks import an_int, positive_int
from ddplab.common.results import Result

METHODS = ("padded", "drop_last", "exact")


def make_validation(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.nn.Module]:
    """``n`` labelled samples and a fixed 3-class linear classifier that gets some of them right.

    Features and weights are small integers, so every logit is an exact float sum: a sample is
    classified the same way in any batch, on any rank, as in the one-process reference.
    """
    g = torch.Generator().manual_seed(20_000 + seed)
    teacher = torch.randint(-2, 3, (4, 3), generator=g).float()  # labels the data
    model = torch.nn.Linear(4, 3, bias=False)
    with torch.no_grad():  # the teacher, perturbed: right on some samples, wrong on others
        model.weight.copy_(teacher.T + torch.randint(-2, 3, (3, 4), generator=g))
    X = torch.randint(-3, 4, (n, 4), generator=g).float()
    return X, (X @ teacher).argmax(1), model


def correct(model, X, y) -> torch.Tensor:
    with torch.no_grad():
        return (model(X).argmax(1) == y).long()


def validation_counts(ctx, dataset_size: int, batch_size: int,
                      seed: int) -> dict:
    """Accuracy counted three ways, each as all-reduced sums."""
    X, y, model = make_validation(seed, dataset_size)
    ids = torch.arange(dataset_size)
    dataset = torch.utils.data.TensorDataset(ids, X, y)
    samplers = {
        "padded": DistributedSampler(dataset, shuffle=False),
        "drop_last": DistributedSampler(dataset, shuffle=False,
                                        drop_last=True),
        # Unpadded, uneven shards (detectron2's InferenceSampler does
        # this with contiguous chunks). Ranks may take different numbers
        # of steps: no collective in the loop (pytorch#22584).
        "exact": range(ctx.rank, dataset_size, ctx.world_size),
    }
    out = {}
    for method, sampler in samplers.items():
        seen, right = [], []
        for i, Xb, yb in DataLoader(dataset, batch_size=batch_size,
                                    sampler=sampler):
            seen += i.tolist()
            right += correct(model, Xb, yb).tolist()
        totals = torch.tensor([sum(right), len(right)],
                              device=ctx.device)
        dist.all_reduce(totals)  # sums, never per-rank means
        out[method] = {"ids": seen, "correct": totals[0].item(),
                       "count": totals[1].item()}
    return out


@dataclasses.dataclass
class Evaluation(Result):
    """One validation pass, three ways, against the one-process accuracy."""

    dataset_size: int
    world_size: int
    batch_size: int
    seed: int
    reference_correct: int  # one process, every sample once
    correct: dict  # method -> all-reduced number of correct predictions
    count: dict  # method -> all-reduced number of predictions
    ids: dict  # method -> [rank] -> dataset indices that rank evaluated
    per_sample: np.ndarray  # (dataset_size,) 1 where the classifier is right (one process)

    @property
    def reference(self) -> float:
        return self.reference_correct / self.dataset_size

    def accuracy(self, method: str) -> float:
        return self.correct[method] / self.count[method]

    def times_evaluated(self, method: str) -> np.ndarray:
        drawn = [i for rank in self.ids[method] for i in rank]
        return np.bincount(drawn, minlength=self.dataset_size)

    def describe(self) -> str:
        """Correct / counted = accuracy, per method, and the one process's."""
        lines = [f"{m:9s}: {self.correct[m]}/{self.count[m]} = {self.accuracy(m):.5f}"
                 for m in METHODS]
        return "\n".join(lines + [f"one process: {self.reference_correct}/"
                                   f"{self.dataset_size} = {self.reference:.5f}"])


def run(dataset_size: int = 10, world_size: int = 4, batch_size: int = 2, seed: int = 0,
        timeout: float = 60.0) -> Evaluation:
    """Validate one fixed classifier on ``world_size`` ranks, padded, dropped and exact."""
    for name, value in (("dataset_size", dataset_size), ("world_size", world_size),
                        ("batch_size", batch_size)):
        positive_int(name, value)
    an_int("seed", seed)
    if dataset_size < world_size:
        raise ValueError(f"dataset_size {dataset_size} < world_size {world_size}: the "
                         "sampler's drop_last would leave every rank without samples")
    results = ddplab.run(validation_counts, world_size, timeout=timeout,
                         dataset_size=dataset_size, batch_size=batch_size, seed=seed)
    X, y, model = make_validation(seed, dataset_size)
    per_sample = correct(model, X, y).numpy()
    return Evaluation.from_ranks(
        results,
        dataset_size=dataset_size, world_size=len(results), batch_size=batch_size, seed=seed,
        reference_correct=int(per_sample.sum()),
        correct={m: results[0][m]["correct"] for m in METHODS},
        count={m: results[0][m]["count"] for m in METHODS},
        ids={m: [r[m]["ids"] for r in results] for m in METHODS}, per_sample=per_sample)
