"""Ranks that start different: which differences DDP removes, and which seeds must differ.

- **Initial weights**: each rank here builds its model from its own seed, so the ranks start
  with different weights. DDP's constructor broadcasts rank 0's parameters and buffers to every
  rank (``_sync_module_states`` in ``torch/nn/parallel/distributed.py``), so after
  construction every rank holds rank 0's.
- **Data order**: ``DistributedSampler`` shuffles one permutation of the dataset, seeded with
  ``seed + epoch``, and gives rank r every W-th index of it. The seed must be the **same** on
  every rank: with a different seed per rank each rank slices a different permutation, and
  some samples are drawn twice in an epoch while others are never drawn.
- **Dropout** (and augmentation): the random stream must **differ** per rank (seed + rank):
  with one seed everywhere every rank draws the same dropout masks for its samples.
"""

from __future__ import annotations

import dataclasses
import textwrap

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

import ddplab
from ddplab.common.checks import an_int, int_in_range, positive_int
from ddplab.common.mlp import make_model
from ddplab.common.results import Result

LAYERS = (4, 3, 2)


def _params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


# ---------------------------------------------------------------- on every rank


def start(ctx, seed: int, dataset_size: int, dropout_samples: int) -> dict:
    """Weights before and after DDP's construction; sampler indices and dropout masks drawn
    with one seed for all ranks and with one seed per rank."""
    model = make_model(LAYERS, seed + ctx.rank).to(ctx.device)  # a different start per rank
    before = _params(model)
    ddp = DDP(model)
    after = _params(ddp.module)
    indices = {}
    for name, sampler_seed in (("same", seed), ("per_rank", seed + ctx.rank)):
        sampler = DistributedSampler(range(dataset_size), num_replicas=ctx.world_size,
                                     rank=ctx.rank, shuffle=True, seed=sampler_seed)
        indices[name] = list(sampler)
    masks = {}
    for name, dropout_seed in (("same", seed), ("per_rank", seed + ctx.rank)):
        torch.manual_seed(dropout_seed)
        # drawn where the model's dropout would draw it: a GPU rank's generator is CUDA's
        ones = torch.ones(dropout_samples, device=ctx.device)
        masks[name] = torch.nn.functional.dropout(ones, 0.5) > 0
    return {"before": before, "after": after, "indices": indices, "masks": masks}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class StartState(Result):
    world_size: int
    seed: int
    dataset_size: int
    params_before: np.ndarray  # (world_size, n): each rank's weights before DDP
    params_after: np.ndarray  # (world_size, n): after DDP's constructor
    sampler_indices: dict  # "same" / "per_rank" seed -> per rank, the indices of one epoch
    dropout_masks: dict  # "same" / "per_rank" seed -> (world_size, samples) kept elements

    json_extras = ("max_diff_before", "max_diff_after", "coverage", "mask_agreement")

    @property
    def max_diff_before(self) -> float:
        """Largest |rank r's weights - rank 0's| before DDP."""
        return float(np.abs(self.params_before - self.params_before[0]).max())

    @property
    def max_diff_after(self) -> float:
        """Largest |rank r's weights after DDP - rank 0's weights before|."""
        return float(np.abs(self.params_after - self.params_before[0]).max())

    def coverage(self) -> dict:
        """Per sampler seed: samples drawn more than once, and never drawn, in one epoch."""
        out = {}
        for name, per_rank in self.sampler_indices.items():
            counts = np.bincount(np.concatenate(per_rank), minlength=self.dataset_size)
            out[name] = {"drawn_twice_or_more": int((counts > 1).sum()),
                         "never_drawn": int((counts == 0).sum())}
        return out

    def mask_agreement(self) -> dict:
        """Per dropout seed: the fraction of mask elements equal to rank 0's, other ranks."""
        return {name: float((masks[1:] == masks[0]).mean())
                for name, masks in self.dropout_masks.items()}

    def describe(self) -> str:
        cover, agree = self.coverage(), self.mask_agreement()
        return "\n".join(textwrap.fill(line, 78, subsequent_indent="  ") for line in [
            f"world size {self.world_size}, model seed {self.seed} + rank",
            f"largest weight difference from rank 0: before DDP {self.max_diff_before:.3f}, "
            f"after DDP's constructor {self.max_diff_after:.1e}",
            f"DistributedSampler over {self.dataset_size} samples, one seed on every rank: "
            f"{cover['same']['drawn_twice_or_more']} drawn twice or more, "
            f"{cover['same']['never_drawn']} never",
            f"seed + rank: {cover['per_rank']['drawn_twice_or_more']} drawn twice or more, "
            f"{cover['per_rank']['never_drawn']} never",
            f"dropout masks equal to rank 0's: {agree['same']:.0%} with one seed, "
            f"{agree['per_rank']:.0%} with seed + rank"])


def run(world_size: int = 4, seed: int = 0, dataset_size: int = 64,
        dropout_samples: int = 1000, timeout: float = 60.0) -> StartState:
    int_in_range("world_size", world_size, 2, ddplab.MAX_WORLD_SIZE)
    an_int("seed", seed)
    positive_int("dataset_size", dataset_size)
    positive_int("dropout_samples", dropout_samples)
    results = ddplab.run(start, world_size, timeout=timeout, seed=seed,
                         dataset_size=dataset_size, dropout_samples=dropout_samples)
    return StartState.from_ranks(
        results,
        world_size=world_size, seed=seed, dataset_size=dataset_size,
        params_before=np.stack([r["before"] for r in results]),
        params_after=np.stack([r["after"] for r in results]),
        sampler_indices={k: [r["indices"][k] for r in results] for k in ("same", "per_rank")},
        dropout_masks={k: np.stack([r["masks"][k] for r in results])
                       for k in ("same", "per_rank")})
