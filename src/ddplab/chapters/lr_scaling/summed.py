"""Are gradients summed? A forum thread's diagnosis of a run that diverged after going from 4
to 16 nodes at an unscaled learning rate, checked: DDP's average at that rate against what a
sum would do. Each rank of the summed run multiplies its loss by the world size, so DDP's
average becomes the sum over ranks; for plain SGD (no weight decay) that is exactly the linear
rule's learning rate, so the two runs take the same path.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ddplab.chapters.lr_scaling import lr_scaling as task
from ddplab.chapters.lr_scaling.lr_sweeps import GrowingBatch
from ddplab.common.results import Result


@dataclasses.dataclass
class SummedCheck(Result):
    """DDP's average at an unscaled ``lr`` (a sweep over world sizes), a summed run and the
    linear rule's run at ``world_size``."""

    averaged: GrowingBatch
    summed: task.Training
    linear: task.Training

    @property
    def same_path(self) -> np.ndarray:
        """Per step both runs took, |summed - linear| / linear of the loss."""
        n = min(len(self.summed.losses), len(self.linear.losses))
        return np.abs(self.summed.losses[:n] - self.linear.losses[:n]) / self.linear.losses[:n]

    @property
    def largest_difference(self) -> float:
        return float(self.same_path.max())

    def averaged_at(self, world_sizes) -> GrowingBatch:
        """The averaged sweep at these world sizes only: what the figure draws."""
        return GrowingBatch({w: self.averaged.runs[w] for w in world_sizes})

    def describe(self, world_sizes=(2, 8)) -> str:
        seeds = len(next(iter(self.averaged.runs.values())))
        lr = self.summed.lr
        lines = [f"averaged, {w} ranks, lr {lr:g}: {self.averaged.diverged(w)}/{seeds} "
                 f"diverged, final {self.averaged.final_loss(w):.3f}" for w in world_sizes]
        return "\n".join(lines + [
            f"summed, {self.summed.world_size} ranks, lr {lr:g}: diverged at step "
            f"{self.summed.diverged_at}",
            f"averaged, {self.linear.world_size} ranks, lr {self.linear.peak_lr:g}: diverged "
            f"at step {self.linear.diverged_at}",
            f"largest relative difference, summed vs lr {self.linear.peak_lr:g}: "
            f"{self.largest_difference:.1e}"])


def run(averaged: GrowingBatch, world_size: int = 8, lr: float = 0.15) -> SummedCheck:
    """Beside ``averaged`` (DDP's average at ``lr``, rule "none"), train ``world_size`` ranks
    with summed gradients at ``lr``, and with the linear rule."""
    return SummedCheck(
        averaged=averaged,
        summed=task.run(world_size=world_size, lr=lr, rule="none", gradients="sum"),
        linear=task.run(world_size=world_size, lr=lr, rule="linear"))
