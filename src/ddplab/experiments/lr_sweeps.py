"""Sweeps for the chapter "Learning rate and batch size": over world sizes, learning rates and
global batch sizes. Each sweep is a sequence of short ``ddplab.run`` calls (a few seconds each),
so the caller can report progress between them: pass ``progress(done, total, label)``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.checks import positive_int
from ddplab.experiments import lr_scaling as task
from ddplab.experiments.noise_scale import TARGET


def _world_sizes(largest: int) -> list:
    """1, 2, 4, ... up to ``largest``, and ``largest`` itself."""
    positive_int("world_size", largest)
    sizes = [2 ** i for i in range(largest.bit_length()) if 2 ** i < largest]
    return sizes + [largest]


def _tell(progress, done: int, total: int, label: str) -> None:
    if progress is not None:
        progress(done, total, label)


# ---------------------------------------------------------------- the same global batch


@dataclasses.dataclass
class SameBatch:
    """One global batch split over 1, 2, 4, ... ranks, and one process without DDP."""

    runs: dict  # world size -> lr_scaling.Training (batch_size = global batch / world size)
    reference: np.ndarray  # per-step losses of one process on the whole global batch

    @property
    def global_batch_size(self) -> int:
        return next(iter(self.runs.values())).global_batch_size

    @property
    def max_diff(self) -> float:
        """Largest |DDP's loss - the one process's loss| over world sizes and steps."""
        return max(float(np.abs(r.losses - self.reference).max()) for r in self.runs.values())


def same_global_batch(global_batch_size: int = 32, world_sizes=(1, 2, 4, 8), lr: float = 0.15,
                      optimizer: str = "sgd", steps: int = 60, seed: int = 0,
                      progress=None) -> SameBatch:
    """The same global batch on every world size (rule none: "1x lr"), and one process."""
    for k in world_sizes:
        positive_int("each world size", k)
        if global_batch_size % k:
            raise ValueError(f"global_batch_size {global_batch_size} does not split evenly "
                             f"over {k} ranks")
    reference = task.one_process(global_batch_size, lr, optimizer=optimizer, steps=steps,
                                 seed=seed)
    runs = {}
    for i, k in enumerate(world_sizes):
        _tell(progress, i, len(world_sizes), f"world size {k}")
        runs[k] = task.run(world_size=k, batch_size=global_batch_size // k, lr=lr, rule="none",
                           optimizer=optimizer, steps=steps, seed=seed)
    _tell(progress, len(world_sizes), len(world_sizes), "done")
    return SameBatch(runs, reference)


# ---------------------------------------------------------------- a growing global batch


@dataclasses.dataclass
class Comparison:
    """One rule at world sizes 1, 2, 4, ...: the same per-rank batch, a growing global batch."""

    runs: dict  # world size -> [lr_scaling.Training, one per seed]

    @property
    def world_sizes(self) -> list:
        return list(self.runs)

    def diverged(self, k: int) -> int:
        """How many of the seeds diverged at world size ``k``."""
        return sum(r.diverged for r in self.runs[k])

    def losses(self, k: int) -> np.ndarray:
        """The expected loss per step, averaged over the seeds, up to the first divergence."""
        n = min(len(r.population_losses) for r in self.runs[k])
        return np.mean([r.population_losses[:n] for r in self.runs[k]], axis=0)

    def steps_to(self, loss: float) -> dict:
        """Per world size: updates until the averaged expected loss first is at most ``loss``
        (None: never, or only before a divergence)."""
        out = {}
        for k in self.runs:
            below = np.flatnonzero(self.losses(k) <= loss)
            out[k] = None if self.diverged(k) or not below.size else int(below[0])
        return out

    def samples_to(self, loss: float) -> dict:
        """Per world size: samples seen (all ranks) until the averaged expected loss reaches
        ``loss``, as in ``steps_to``."""
        return {k: None if s is None else s * self.runs[k][0].global_batch_size
                for k, s in self.steps_to(loss).items()}

    def final_loss(self, k: int, last: int = 20) -> float:
        """The averaged expected loss over the last ``last`` steps (inf if a seed diverged)."""
        return np.inf if self.diverged(k) else float(self.losses(k)[-last:].mean())

    def describe(self, target: float) -> str:
        """One line per world size (under 70 characters)."""
        steps, samples = self.steps_to(target), self.samples_to(target)
        lines = []
        for k, runs in self.runs.items():
            head = f"  {k} rank{'s' if k > 1 else ' '}: lr {runs[0].peak_lr:<6.3g}"
            if self.diverged(k):
                lines.append(f"{head} diverged ({self.diverged(k)} of {len(runs)} seeds)")
            elif steps[k] is None:
                lines.append(f"{head} never at {target:g}; "
                             f"final {self.final_loss(k):.3f}")
            else:
                lines.append(f"{head} {steps[k]:3d} steps, {samples[k]:4d} samples to "
                             f"{target:g}; final {self.final_loss(k):.3f}")
        return "\n".join(lines)


def compare(world_size: int = 8, batch_size: int = 4, lr: float = 0.15, rule: str = "linear",
            warmup_steps: int = 0, optimizer: str = "sgd", steps: int = 60, seeds=(0,),
            progress=None) -> Comparison:
    """``lr_scaling.run`` at world sizes 1, 2, 4, ... up to ``world_size`` for every seed, one
    call each."""
    task.check(batch_size=batch_size, lr=lr, rule=rule, optimizer=optimizer,
               warmup_steps=warmup_steps, steps=steps)
    sizes = _world_sizes(world_size)
    runs, total = {}, len(sizes) * len(seeds)
    for i, k in enumerate(sizes):
        runs[k] = []
        for j, seed in enumerate(seeds):
            _tell(progress, i * len(seeds) + j, total, f"world size {k}, seed {seed}")
            runs[k].append(task.run(world_size=k, batch_size=batch_size, lr=lr, rule=rule,
                                    optimizer=optimizer, warmup_steps=warmup_steps,
                                    steps=steps, seed=seed))
    _tell(progress, total, total, "done")
    return Comparison(runs)


# ---------------------------------------------------------------- where it diverges


@dataclasses.dataclass
class Divergence:
    """Which learning rates diverge within ``steps`` steps, at each world size."""

    world_sizes: list
    batch_size: int
    optimizer: str
    steps: int
    lrs: list  # increasing
    diverged: dict  # world size -> [True/False per lr tried]; rates above a diverging one
    # are not run (for this task the loss only grows faster as the rate grows)

    def smallest_diverging(self, k: int) -> float | None:
        return next((lr for lr, d in zip(self.lrs, self.diverged[k]) if d), None)

    def largest_stable(self, k: int) -> float | None:
        stable = [lr for lr, d in zip(self.lrs, self.diverged[k]) if not d]
        return stable[-1] if stable else None

    def describe(self, base_lr: float) -> str:
        """One line per world size (under 70 characters)."""
        return "\n".join(
            f"{k} rank{'s' if k > 1 else ' '} (global {k * self.batch_size:2d}): trains at "
            f"{self.largest_stable(k):.3g}, diverges at {self.smallest_diverging(k):.3g}; "
            f"linear: {base_lr * k:.3g}" for k in self.world_sizes)


def divergence(world_sizes=(1, 2, 4, 8), batch_size: int = 4,
               lrs=tuple(0.05 * 2 ** (i / 2) for i in range(11)), optimizer: str = "sgd",
               steps: int = 50, seed: int = 0, progress=None) -> Divergence:
    """Train at every rate in ``lrs`` (used as it is: rule none), smallest first, at every world
    size, until one diverges (loss not finite, or above ``DIVERGES_ABOVE`` x the start)."""
    task.check(batch_size=batch_size, optimizer=optimizer, steps=steps)
    lrs = sorted(lrs)
    for lr in lrs:
        task.check(lr=lr)
    for k in world_sizes:
        positive_int("each world size", k)
    diverged, total = {}, len(world_sizes) * len(lrs)
    for i, k in enumerate(world_sizes):
        diverged[k] = []
        for j, lr in enumerate(lrs):
            _tell(progress, i * len(lrs) + j, total, f"world size {k}, lr {lr:.3g}")
            r = task.run(world_size=k, batch_size=batch_size, lr=lr, rule="none",
                         optimizer=optimizer, steps=steps, seed=seed)
            diverged[k].append(r.diverged)
            if r.diverged:
                break
    _tell(progress, total, total, "done")
    return Divergence(list(world_sizes), batch_size, optimizer, steps, lrs, diverged)


# ---------------------------------------------------------------- steps to a target loss


def steps_to_target(ctx, batch_size: int, lrs: list, seeds: list, target: float,
                    max_steps: int) -> list:
    """For every (lr, seed): SGD steps with DDP until the expected loss reaches ``target``; None
    if it diverged or did not get there within the budget. One call trains them all in turn.

    Only the best learning rate (fewest steps, median over seeds) matters, so the rates are
    tried from the largest down (too large ones diverge within a few steps), and a run stops
    once it has taken as many steps as the best median so far: a rate whose median is at
    least as good has at least half of its runs finishing before that.
    """
    W = ctx.world_size
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    limit = task.DIVERGES_ABOVE * task.start_loss()
    steps, best = {}, max_steps
    for lr in sorted(lrs, reverse=True):
        for seed in seeds:
            model = task.make_model().to(ctx.device)
            ddp = DDP(model)
            opt = torch.optim.SGD(ddp.parameters(), lr=lr)
            steps[lr, seed] = None
            for t in range(best):
                X, y = task.global_batch(seed, t, W * batch_size)
                opt.zero_grad()
                F.mse_loss(ddp(X[rows].to(ctx.device)), y[rows].to(ctx.device)).backward()
                opt.step()
                loss = task.population_loss(model)  # identical on every rank: same decision
                if loss <= target:
                    steps[lr, seed] = t + 1
                    break
                if not loss < limit:  # diverged (or not finite)
                    break
        median = np.median([np.inf if steps[lr, s] is None else steps[lr, s] for s in seeds])
        best = int(min(best, median))
    return [steps[lr, seed] for lr in lrs for seed in seeds]


@dataclasses.dataclass
class CriticalBatch:
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
                 f"(fit: {s_min * (1 + b_crit / B):5.1f})"
                 for B, steps, lr in zip(self.global_batch_sizes, self.best_steps,
                                         self.best_lrs)]
        return "\n".join(lines + [f"fit: S_min = {s_min:.1f} steps, B_crit = {b_crit:.1f}"])

    def fit(self) -> tuple[float, float]:
        """(S_min, B_crit) of S(B) = S_min (1 + B_crit / B), the steps-batch tradeoff of
        McCandlish et al. 2018, section 2.3 (S/S_min - 1 = (E/E_min - 1)^-1 with E = B S);
        least squares on the relative error (S is linear in 1/B)."""
        B = np.array(self.global_batch_sizes, float)
        S = self.best_steps
        A = np.stack([np.ones_like(B), 1 / B], axis=1) / S[:, None]
        (s_min, c), *_ = np.linalg.lstsq(A, np.ones_like(S), rcond=None)
        return float(s_min), float(c / s_min)


def critical_batch(world_size: int = 2, batch_sizes=(1, 2, 4, 8, 16, 32, 64, 128),
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
        _tell(progress, i, len(batch_sizes), f"global batch {world_size * b}")
        result = ddplab.run(steps_to_target, world_size, timeout=timeout, batch_size=b,
                            lrs=list(lrs), seeds=list(seeds), target=target,
                            max_steps=max_steps)[0]
        steps.append([np.inf if c is None else c for c in result])
    _tell(progress, len(batch_sizes), len(batch_sizes), "done")
    return CriticalBatch(
        world_size=world_size, global_batch_sizes=[world_size * b for b in batch_sizes],
        lrs=list(lrs), seeds=list(seeds), target=target, max_steps=max_steps,
        steps=np.array(steps, float).reshape(len(batch_sizes), len(lrs), len(seeds)))
