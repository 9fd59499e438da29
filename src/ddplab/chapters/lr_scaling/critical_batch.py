"""The critical batch size: how many steps a target loss takes at each global batch, each at its
best learning rate, against the steps-batch trade-off S(B) = S_min (1 + B_crit / B) of
McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training", section 2.3).

A sweep of short runs (one ``ddplab.run`` per global batch), reporting progress between them.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.chapters.lr_scaling import lr_scaling as task
from ddplab.chapters.lr_scaling import regression
from ddplab.chapters.lr_scaling.noise_scale import TARGET
from ddplab.common.progress import report as progress_report
from ddplab.common.results import Result


def steps_to_target(ctx, batch_size: int, lrs: list, seeds: list, target: float,
                    max_steps: int) -> list:
    """For every (lr, seed): SGD steps with DDP until the expected loss reaches ``target``; None
    if it diverged or did not get there within the budget. One call trains them all in turn.

    Only the best learning rate (fewest steps, median over seeds) matters, so the rates are
    tried from the largest down (too large ones diverge within a few steps), and a run stops
    once it has taken as many steps as the best median so far: a rate whose median is at
    least as good has at least half of its runs finishing before that.
    """
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    limit = task.DIVERGES_ABOVE * regression.start_loss()
    steps, best = {}, max_steps
    for lr in sorted(lrs, reverse=True):
        for seed in seeds:
            model = regression.make_regression_model().to(ctx.device)
            ddp = DDP(model)
            opt = torch.optim.SGD(ddp.parameters(), lr=lr)
            steps[lr, seed] = None
            for t in range(best):
                X, y = regression.global_batch(seed, t, ctx.world_size * batch_size)
                opt.zero_grad()
                F.mse_loss(ddp(X[rows].to(ctx.device)), y[rows].to(ctx.device)).backward()
                opt.step()
                loss = regression.population_loss(model)  # identical on every rank: same decision
                if loss <= target:
                    steps[lr, seed] = t + 1
                    break
                if not loss < limit:  # diverged (or not finite)
                    break
        median = np.median([np.inf if steps[lr, s] is None else steps[lr, s] for s in seeds])
        best = int(min(best, median))
    return [steps[lr, seed] for lr in lrs for seed in seeds]


@dataclasses.dataclass
class CriticalBatch(Result):
    """Steps to a target loss against the global batch, each at its best learning rate."""

    world_size: int
    global_batch_sizes: list
    lrs: list
    seeds: list
    target: float
    max_steps: int
    steps: np.ndarray  # (batches, lrs, seeds): steps to the target; inf: diverged, or not
    # within max_steps or within the best median so far (see ``steps_to_target``)

    @property
    def median_steps(self) -> np.ndarray:  # (batches, lrs)
        return np.median(self.steps, axis=2)

    @property
    def best_lrs(self) -> np.ndarray:
        return np.array(self.lrs)[np.argmin(self.median_steps, axis=1)]

    @property
    def best_steps(self) -> np.ndarray:
        return self.median_steps.min(axis=1)

    def describe(self) -> str:
        s_min, b_crit = self.fit()
        lines = [f"global batch {B:3d}: {steps:4.0f} steps at lr {lr:<5.3g} "
                 f"(fit: {fitted:5.1f})"
                 for B, steps, lr, fitted in zip(self.global_batch_sizes, self.best_steps,
                                                 self.best_lrs,
                                                 self.fitted_steps(self.global_batch_sizes))]
        return "\n".join(lines + [f"fit: S_min = {s_min:.1f} steps, B_crit = {b_crit:.1f}"])

    def batch_grid(self, points: int = 100) -> np.ndarray:
        """``points`` global batch sizes from the smallest to the largest, on a log scale: where
        the figure draws the fit."""
        return np.geomspace(self.global_batch_sizes[0], self.global_batch_sizes[-1], points)

    def fitted_steps(self, global_batch_sizes) -> np.ndarray:
        """The fit's steps, ``S_min (1 + B_crit / B)``, at each global batch size ``B``."""
        s_min, b_crit = self.fit()
        return s_min * (1 + b_crit / np.asarray(global_batch_sizes, float))

    def halving_steps(self, global_batch_sizes) -> np.ndarray:
        """``S_min B_crit / B``: the fit's small-batch limit, where doubling the batch halves
        the steps."""
        s_min, b_crit = self.fit()
        return s_min * b_crit / np.asarray(global_batch_sizes, float)

    @property
    def linear_rule_lrs(self) -> np.ndarray:
        """The best learning rate of the smallest batch, scaled with the batch (linear rule)."""
        B = np.array(self.global_batch_sizes, float)
        return self.best_lrs[0] * B / B[0]

    def fit(self) -> tuple[float, float]:
        """(S_min, B_crit) of S(B) = S_min (1 + B_crit / B), the steps-batch tradeoff of
        McCandlish et al. 2018, section 2.3 (S/S_min - 1 = (E/E_min - 1)^-1 with E = B S);
        least squares on the relative error (S is linear in 1/B)."""
        B = np.array(self.global_batch_sizes, float)
        S = self.best_steps
        A = np.stack([np.ones_like(B), 1 / B], axis=1) / S[:, None]
        (s_min, c), *_ = np.linalg.lstsq(A, np.ones_like(S), rcond=None)
        return float(s_min), float(c / s_min)


def run(world_size: int = 2, batch_sizes=(1, 2, 4, 8, 16, 32, 64, 128),
                   lrs=tuple(0.025 * 2 ** (i / 2) for i in range(12)), seeds=(0, 1, 2),
                   target: float = TARGET, max_steps: int = 400, progress=None,
                   timeout: float = 120.0) -> CriticalBatch:
    """One ``ddplab.run`` per per-rank batch size: every learning rate and seed, steps counted."""
    for b in batch_sizes:
        task.check(batch_size=b)
    for lr in lrs:
        task.check(lr=lr)
    task.check(steps=max_steps)
    steps = []
    for i, b in enumerate(batch_sizes):
        progress_report(progress, i, len(batch_sizes), f"global batch {world_size * b}")
        result = ddplab.run(steps_to_target, world_size, timeout=timeout, batch_size=b,
                            lrs=list(lrs), seeds=list(seeds), target=target,
                            max_steps=max_steps)[0]
        steps.append([np.inf if c is None else c for c in result])
    progress_report(progress, len(batch_sizes), len(batch_sizes), "done")
    return CriticalBatch.from_ranks(
        ddplab.placement(),
        world_size=world_size, global_batch_sizes=[world_size * b for b in batch_sizes],
        lrs=list(lrs), seeds=list(seeds), target=target, max_steps=max_steps,
        steps=np.array(steps, float).reshape(len(batch_sizes), len(lrs), len(seeds)),
    )
