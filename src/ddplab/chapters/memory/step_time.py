"""Time per step of each strategy, side by side on the same ranks: every strategy's model is
built first, then their steps alternate, so that drift of a shared machine falls on all of
them alike. A step is ``ddplab.common.timed_step``'s: from a barrier to the end of the
optimizer step, on a clock that waits for a GPU; the step of an iteration is the slowest rank's,
and a variant's figure is the median step.
"""

from __future__ import annotations

import dataclasses

import ddplab
from ddplab.chapters.memory.memory import BATCH_SIZE, widths
from ddplab.chapters.memory.strategies import Trained
from ddplab.common import timed_step
from ddplab.common.checks import positive_int
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.results import Result
from ddplab.engine.placement import require

# (label, strategy, gradient_as_bucket_view); DDP first: the others are ratios to it
VARIANTS = (("ddp", "ddp", False), ("ddp, bucket view", "ddp", True),
            ("zero1", "zero1", False), ("fsdp", "fsdp", False))


def step_times(ctx, optimizer: str, params_millions: float, steps: int, seed: int) -> dict:
    """Each variant's steps on this rank, ``timed_step.timed`` records (the first, warm-up step
    left out)."""
    layers = widths(params_millions)
    trained = {label: Trained(strategy, make_model(layers, seed=seed, init="he").to(ctx.device),
                              optimizer, view, ctx.world_size, ctx.device)
               for label, strategy, view in VARIANTS}
    times = {label: [] for label in trained}
    rows = slice(ctx.rank * BATCH_SIZE, (ctx.rank + 1) * BATCH_SIZE)
    for step in range(steps + 1):
        X, y = make_batch(layers, BATCH_SIZE, ctx.world_size, seed, step)
        X_rank, y_rank = X[rows].to(ctx.device), y[rows].to(ctx.device)
        for label, model in trained.items():
            record = timed_step.timed(model.step, ctx.device, X_rank, y_rank)
            if step:
                times[label].append(record)
    return times


@dataclasses.dataclass
class StepTimes(Result):
    world_size: int
    optimizer: str
    params_millions: float
    step_s: dict  # label -> seconds of its median step (timed_step.median_step)

    def ratios(self) -> dict:
        return {label: t / self.step_s["ddp"] for label, t in self.step_s.items()}

    def describe(self) -> str:
        lines = [f"world size {self.world_size}, {self.optimizer}, {self.params_millions:g} M "
                 f"parameters: median step of the slowest rank, / DDP's"]
        for label, ratio in self.ratios().items():
            lines.append(f"  {label:<17} {1e3 * self.step_s[label]:7.1f} ms  x{ratio:.2f}")
        return "\n".join(lines)


def run(world_size: int = 2, optimizer: str = "adam", params_millions: float = 8.0,
        steps: int = 5, seed: int = 0, timeout: float = 300.0) -> StepTimes:
    positive_int("world_size", world_size)
    positive_int("steps", steps)
    for _, strategy, _ in VARIANTS:  # what does not run there, refused before any rank starts
        require(strategy, ddplab.placement())
    results = ddplab.run(step_times, world_size, timeout=timeout, optimizer=optimizer,
                         params_millions=params_millions, steps=steps, seed=seed)
    return StepTimes.from_ranks(results, world_size=world_size, optimizer=optimizer,
                                params_millions=params_millions,
                                step_s={label: timed_step.median_step(
                                            [r[label] for r in results])["step"]
                                        for label in results[0]})
