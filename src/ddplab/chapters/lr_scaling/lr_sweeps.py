"""Sweeps for the chapter "Learning rate and batch size": over world sizes, learning rates and
global batch sizes. Each sweep is a sequence of short ``ddplab.run`` calls (a few seconds each),
so the caller can report progress between them: pass ``progress(done, total, label)``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ddplab.chapters.lr_scaling import lr_scaling as task
from ddplab.common.checks import positive_int
from ddplab.common.progress import report as progress_report
from ddplab.common.results import Result


def _world_sizes(largest_world_size: int) -> list:
    """1, 2, 4, ... up to ``largest_world_size``, and ``largest_world_size`` itself."""
    positive_int("largest_world_size", largest_world_size)
    sizes = [2 ** i for i in range(largest_world_size.bit_length()) if 2 ** i < largest_world_size]
    return sizes + [largest_world_size]


# ---------------------------------------------------------------- the same global batch


@dataclasses.dataclass
class SameBatch(Result):
    """One global batch split over 1, 2, 4, ... ranks, and one process without DDP."""

    runs: dict  # world size -> lr_scaling.Training (batch_size = global batch / world size)
    reference: np.ndarray  # per-step losses of one process on the whole global batch

    @property
    def global_batch_size(self) -> int:
        return next(iter(self.runs.values())).global_batch_size

    def loss_diff(self, world_size: int) -> np.ndarray:
        """Per step: |DDP's loss at this world size - the one process's loss|."""
        return np.abs(self.runs[world_size].losses - self.reference)

    @property
    def max_diff(self) -> float:
        """Largest |DDP's loss - the one process's loss| over world sizes and steps."""
        return max(float(self.loss_diff(w).max()) for w in self.runs)


def same_global_batch(global_batch_size: int = 32, world_sizes=(1, 2, 4, 8), lr: float = 0.15,
                      optimizer: str = "sgd", steps: int = 60, seed: int = 0,
                      progress=None) -> SameBatch:
    """The same global batch on every world size (rule none: "1x lr"), and one process."""
    for world_size in world_sizes:
        positive_int("each world size", world_size)
        if global_batch_size % world_size:
            raise ValueError(f"global_batch_size {global_batch_size} does not split evenly "
                             f"over {world_size} ranks")
    reference = task.one_process(global_batch_size, lr, optimizer=optimizer, steps=steps,
                                 seed=seed)
    runs = {}
    for i, world_size in enumerate(world_sizes):
        progress_report(progress, i, len(world_sizes), f"world size {world_size}")
        runs[world_size] = task.run(world_size=world_size,
                                    batch_size=global_batch_size // world_size, lr=lr,
                                    rule="none", optimizer=optimizer, steps=steps, seed=seed)
    progress_report(progress, len(world_sizes), len(world_sizes), "done")
    return SameBatch.from_ranks(runs, runs, reference)


# ---------------------------------------------------------------- a growing global batch


@dataclasses.dataclass
class Limit(Result):
    """Where a rule stops working as the world grows (``GrowingBatch.limit``)."""

    held: int  # the largest world size at which every seed trained
    held_batch: int  # its global batch
    broke: int  # the smallest world size at which a seed diverged
    broke_batch: int
    broke_lr: float  # the learning rate the rule asked for there
    broke_seeds: int  # how many seeds diverged there
    seeds: int

    def figures(self, prefix: str) -> dict:
        """The numbers the page's text quotes, named ``prefix_held`` and so on."""
        return {f"{prefix}_{name}": getattr(self, name) for name in
                ("held", "held_batch", "broke", "broke_batch", "broke_lr")}

    def describe(self) -> str:
        return (f"trains up to {self.held} ranks (global batch {self.held_batch});\n"
                f"{self.broke_seeds} of {self.seeds} seeds diverge at {self.broke} ranks "
                f"(lr {self.broke_lr:g})")


@dataclasses.dataclass
class GrowingBatch(Result):
    """One rule at world sizes 1, 2, 4, ...: the same per-rank batch, a growing global batch."""

    runs: dict  # world size -> [lr_scaling.Training, one per seed]
    target: float | None = None  # the expected loss that describe() counts steps to
    pending: tuple = ()  # world sizes still to run: a sweep's partial result, drawn meanwhile

    @property
    def noise_floor(self) -> float:
        """The lowest expected loss any model reaches (the label noise's variance)."""
        return next(iter(self.runs.values()))[0].noise_floor

    @property
    def world_sizes(self) -> list:
        return list(self.runs)

    def diverged(self, world_size: int) -> int:
        """How many of the seeds diverged at world size ``world_size``."""
        return sum(r.diverged for r in self.runs[world_size])

    def losses(self, world_size: int) -> np.ndarray:
        """The expected loss per step, averaged over the seeds, up to the first divergence."""
        n = min(len(r.population_losses) for r in self.runs[world_size])
        return np.mean([r.population_losses[:n] for r in self.runs[world_size]], axis=0)

    def steps_to(self, loss: float) -> dict:
        """Per world size: updates until the averaged expected loss first is at most ``loss``
        (None: never, or only before a divergence)."""
        out = {}
        for world_size in self.runs:
            below = np.flatnonzero(self.losses(world_size) <= loss)
            out[world_size] = None if self.diverged(world_size) or not below.size else int(below[0])
        return out

    def samples_to(self, loss: float) -> dict:
        """Per world size: samples seen (all ranks) until the averaged expected loss reaches
        ``loss``, as in ``steps_to``."""
        return {world_size: None if s is None else s * self.runs[world_size][0].global_batch_size
                for world_size, s in self.steps_to(loss).items()}

    def limit(self) -> Limit:
        """The largest world size at which no seed diverged, and the first at which one did."""
        held = max(w for w in self.runs if self.diverged(w) == 0)
        broke = min(w for w in self.runs if self.diverged(w))
        return Limit(held=held, held_batch=self.runs[held][0].global_batch_size, broke=broke,
                     broke_batch=self.runs[broke][0].global_batch_size,
                     broke_lr=self.runs[broke][0].peak_lr,
                     broke_seeds=self.diverged(broke), seeds=len(self.runs[broke]))

    def final_loss(self, world_size: int, last: int = 20) -> float:
        """The averaged expected loss over the last ``last`` steps (inf if a seed diverged)."""
        if self.diverged(world_size):
            return np.inf
        return float(self.losses(world_size)[-last:].mean())

    def describe(self) -> str:
        """One line per world size (under 70 characters), counting steps to ``target``."""
        target = self.target
        if target is None:
            return "\n".join(f"  {w} rank{'s' if w > 1 else ' '}: final "
                             f"{self.final_loss(w):.3f}" for w in self.runs)
        steps, samples = self.steps_to(target), self.samples_to(target)
        lines = []
        for world_size, runs in self.runs.items():
            ranks = f"{world_size} rank{'s' if world_size > 1 else ' '}"
            head = f"  {ranks}: lr {runs[0].peak_lr:<6.3g}"
            if self.diverged(world_size):
                lines.append(f"{head} diverged ({self.diverged(world_size)} of {len(runs)} seeds)")
            elif steps[world_size] is None:
                lines.append(f"{head} never at {target:g}; "
                             f"final {self.final_loss(world_size):.3f}")
            else:
                lines.append(f"{head} {steps[world_size]:3d} steps, "
                             f"{samples[world_size]:4d} samples to "
                             f"{target:g}; final {self.final_loss(world_size):.3f}")
        return "\n".join(lines)


def compare(largest_world_size: int = 8, batch_size: int = 4, lr: float = 0.15,
            rule: str = "linear", warmup_steps: int = 0, optimizer: str = "sgd",
            steps: int = 60, seeds=(0,), target: float | None = None,
            progress=None) -> GrowingBatch:
    """``lr_scaling.run`` at world sizes 1, 2, 4, ... up to ``largest_world_size`` for every
    seed, one call each; ``target`` is the expected loss the result counts steps to."""
    task.check(batch_size=batch_size, lr=lr, rule=rule, optimizer=optimizer,
               warmup_steps=warmup_steps, steps=steps)
    sizes = _world_sizes(largest_world_size)
    runs, total = {}, len(sizes) * len(seeds)
    for i, world_size in enumerate(sizes):
        runs[world_size] = []
        for j, seed in enumerate(seeds):
            done = {w: list(r) for w, r in runs.items() if r}  # drawn while the next runs
            pending = tuple(w for w in sizes if w not in done)  # named in its legend already
            progress_report(progress, i * len(seeds) + j, total,
                            f"world size {world_size}, seed {seed}",
                            partial=GrowingBatch(done, target, pending) if done else None)
            runs[world_size].append(task.run(world_size=world_size, batch_size=batch_size,
                                             lr=lr, rule=rule, optimizer=optimizer,
                                             warmup_steps=warmup_steps, steps=steps, seed=seed))
    progress_report(progress, total, total, "done")
    return GrowingBatch.from_ranks(runs, runs, target)


# ---------------------------------------------------------------- where it diverges


@dataclasses.dataclass
class Divergence(Result):
    """Which learning rates diverge within ``steps`` steps, at each world size."""

    world_sizes: list
    batch_size: int
    optimizer: str
    steps: int
    lrs: list  # increasing
    diverged: dict  # world size -> [True/False per lr tried]; rates above a diverging one
    # are not run (for this task the loss only grows faster as the rate grows)
    base_lr: float  # one process's rate, which each rule scales (rule_lrs, describe)

    @property
    def rule_lrs(self) -> dict:
        """Rule -> the rate it asks for at each world size, from ``base_lr``."""
        return {rule: [self.base_lr * task.rule_factor(rule, w) for w in self.world_sizes]
                for rule in task.RULES}

    def smallest_diverging(self, world_size: int) -> float | None:
        return next((lr for lr, d in zip(self.lrs, self.diverged[world_size]) if d), None)

    def largest_stable(self, world_size: int) -> float | None:
        stable = [lr for lr, d in zip(self.lrs, self.diverged[world_size]) if not d]
        return stable[-1] if stable else None

    def describe(self) -> str:
        """One line per world size (under 70 characters)."""
        return "\n".join(
            f"{w} rank{'s' if w > 1 else ' '} (global {w * self.batch_size:2d}): trains at "
            f"{self.largest_stable(w):.3g}, diverges at {self.smallest_diverging(w):.3g}; "
            f"linear: {linear:.3g}"
            for w, linear in zip(self.world_sizes, self.rule_lrs["linear"]))


def divergence(world_sizes=(1, 2, 4, 8), batch_size: int = 4,
               lrs=tuple(0.05 * 2 ** (i / 2) for i in range(11)), optimizer: str = "sgd",
               steps: int = 50, seed: int = 0, base_lr: float = 0.15,
               progress=None) -> Divergence:
    """Train at every rate in ``lrs`` (used as it is: rule none), smallest first, at every world
    size, until one diverges (loss not finite, or above ``DIVERGES_ABOVE`` x the start)."""
    task.check(batch_size=batch_size, optimizer=optimizer, steps=steps)
    lrs = sorted(lrs)
    for lr in lrs:
        task.check(lr=lr)
    for world_size in world_sizes:
        positive_int("each world size", world_size)
    diverged, total = {}, len(world_sizes) * len(lrs)
    r = None  # the last run: the result records its placement (one pool, one placement)
    for i, world_size in enumerate(world_sizes):
        diverged[world_size] = []
        for j, lr in enumerate(lrs):
            progress_report(progress, i * len(lrs) + j, total,
                            f"world size {world_size}, lr {lr:.3g}")
            r = task.run(world_size=world_size, batch_size=batch_size, lr=lr, rule="none",
                         optimizer=optimizer, steps=steps, seed=seed)
            diverged[world_size].append(r.diverged)
            if r.diverged:
                break
    progress_report(progress, total, total, "done")
    return Divergence.from_ranks(r, list(world_sizes), batch_size, optimizer, steps, lrs,
                                 diverged, base_lr)
