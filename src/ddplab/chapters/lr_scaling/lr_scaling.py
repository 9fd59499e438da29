"""Learning rate and batch size: keep the global batch (1x lr), or grow it (linear, square root).

    python -m ddplab lr-scaling --world-size 8 --batch-size 4 --lr 0.1 --rule linear \\
        --warmup-steps 10 --steps 100 --seed 0 --json
    torchrun --nproc-per-node 8 -m ddplab lr-scaling --batch-size 4 --lr 0.1 --rule linear --json

The task is linear regression with label noise, on fresh samples every step (no epochs). Step t
draws the t-th global batch of a seeded stream, world_size x batch_size samples, and rank r
trains on rows r*batch_size to (r+1)*batch_size: the ranks of one step together hold exactly
the batch one process would draw. ``lr`` is the rate for one process with ``batch_size``; the
rule multiplies it by 1 (none), the world size (linear) or its square root (sqrt), reached after
a gradual warmup of ``warmup_steps`` steps (Goyal et al. 2017, section 2.2).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.chapters.lr_scaling import regression
from ddplab.chapters.lr_scaling.regression import (
    global_batch,
    make_regression_model,
    population_loss,
    start_loss,
)
from ddplab.common.checks import int_at_least, one_of, positive_int, positive_number
from ddplab.common.results import Result

COMMAND = "lr-scaling"  # python -m ddplab lr-scaling

RULES = ("none", "linear", "sqrt")
OPTIMIZERS = ("sgd", "adam")
GRADIENTS = ("mean", "sum")  # "sum": each rank's loss times world size, as if DDP summed
DIVERGES_ABOVE = 100.0  # a run has diverged once its loss is this many times the start loss


# ---------------------------------------------------------------- rules and schedule


def rule_factor(rule: str, world_size: int) -> float:
    """How much a rule multiplies the one-process learning rate when the batch grows
    ``world_size`` times (Goyal et al.'s k).

    linear: Goyal et al. 2017, section 2.1 ("When the minibatch size is multiplied by k,
    multiply the learning rate by k"). sqrt: the learning-rate part of the square root
    scaling rule for Adam (Malladi et al. 2022), which also rescales Adam's betas and epsilon.
    """
    return {"none": 1.0, "linear": float(world_size), "sqrt": math.sqrt(world_size)}[rule]


def lr_schedule(lr: float, rule: str, world_size: int,
                warmup_steps: int, steps: int) -> list:
    """The learning rate of every step: gradual warmup, then constant.

    Goyal et al. 2017, section 2.2: start from lr and add a constant
    amount every step, reaching lr * factor after ``warmup_steps``
    steps. Step t < warmup_steps: lr + (lr * factor - lr) * t / warmup.
    """
    peak = lr * rule_factor(rule, world_size)
    return [lr + (peak - lr) * t / warmup_steps if t < warmup_steps
            else peak for t in range(steps)]


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    """Plain SGD (no momentum, no weight decay) or Adam with PyTorch's defaults."""
    return torch.optim.SGD(params, lr=lr) if name == "sgd" else torch.optim.Adam(params, lr=lr)


# ---------------------------------------------------------------- on every rank


def train(ctx, batch_size: int, lr: float, rule: str, optimizer: str,
          warmup_steps: int, steps: int, seed: int,
          gradients: str = "mean") -> dict:
    """Train the task with DDP on every rank; record every step's loss
    over the whole global batch."""
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    model = make_regression_model().to(ctx.device)
    ddp = DDP(model)  # kept referenced until backward is done
    opt = make_optimizer(optimizer, ddp.parameters(), lr)
    lrs = lr_schedule(lr, rule, ctx.world_size, warmup_steps, steps)
    limit = DIVERGES_ABOVE * start_loss()
    losses, population, diverged_at = [], [], None
    for t in range(steps):
        X_all, y_all = global_batch(seed, t, ctx.world_size * batch_size)
        X_all, y_all = X_all.to(ctx.device), y_all.to(ctx.device)
        loss = F.mse_loss(ddp(X_all[rows]), y_all[rows])
        opt.zero_grad()
        # DDP divides by the world size: times the world size, a sum.
        (loss * ctx.world_size if gradients == "sum" else loss).backward()
        with torch.no_grad():  # each rank holds the whole global batch
            losses.append(float(F.mse_loss(model(X_all), y_all)))
        population.append(population_loss(model))
        if not math.isfinite(losses[-1]) or losses[-1] > limit:
            diverged_at = t  # same loss, same step, on every rank
            break
        for group in opt.param_groups:
            group["lr"] = lrs[t]
        opt.step()
    return {"losses": losses, "population_losses": population,
            "diverged_at": diverged_at}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class Training(Result):
    """One DDP training run: per-step losses and learning rates."""

    world_size: int
    batch_size: int  # per rank
    lr: float  # one process with batch_size
    rule: str
    optimizer: str
    warmup_steps: int
    steps: int
    seed: int
    gradients: str
    lrs: np.ndarray  # (steps,) the schedule; a diverged run stopped before using all of it
    losses: np.ndarray  # (steps run,) mean loss over the global batch, before the step's update
    population_losses: np.ndarray  # (steps run,) the exact expected loss of the same model
    diverged_at: int | None  # the step whose loss was not finite or too large, if any

    @property
    def global_batch_size(self) -> int:
        return self.world_size * self.batch_size

    @property
    def factor(self) -> float:
        return rule_factor(self.rule, self.world_size)

    @property
    def peak_lr(self) -> float:
        return self.lr * self.factor

    @property
    def diverged(self) -> bool:
        return self.diverged_at is not None

    @property
    def noise_floor(self) -> float:
        """The expected loss of the true weights: the label noise's variance."""
        return regression.NOISE ** 2

    @property
    def samples(self) -> np.ndarray:
        """Samples seen before each recorded step (the x axis that makes rules comparable)."""
        return np.arange(len(self.losses)) * self.global_batch_size

    def steps_to(self, loss: float) -> int | None:
        """Updates taken before the expected loss first is at most ``loss`` (None: never)."""
        below = np.flatnonzero(self.population_losses <= loss)
        return int(below[0]) if below.size else None

    def json_fields(self) -> dict:
        return {"world_size": self.world_size, "batch_size": self.batch_size,
                "global_batch_size": self.global_batch_size, "lr": self.lr,
                "rule": self.rule, "factor": self.factor, "peak_lr": self.peak_lr,
                "optimizer": self.optimizer, "warmup_steps": self.warmup_steps,
                "steps": self.steps, "seed": self.seed, "gradients": self.gradients,
                "lrs": self.lrs, "losses": self.losses,
                "population_losses": self.population_losses,
                "diverged": self.diverged, "diverged_at": self.diverged_at}

    def describe(self) -> str:
        end = (f"diverged at step {self.diverged_at}" if self.diverged
               else f"loss {self.losses[0]:.3f} -> {self.losses[-1]:.3f} "
                    f"(expected loss {self.population_losses[-1]:.3f}, "
                    f"noise floor {self.noise_floor:g})")
        return "\n".join([
            f"world size {self.world_size} x batch size {self.batch_size} = global batch "
            f"{self.global_batch_size}; {self.optimizer}, rule {self.rule!r}: lr "
            f"{self.lr:g} x {self.factor:.3g} = {self.peak_lr:.4g} after "
            f"{self.warmup_steps} warmup steps",
            f"{len(self.losses)} of {self.steps} steps: {end}"])


def run(world_size: int = 4, batch_size: int = 4, lr: float = 0.15, rule: str = "linear",
        optimizer: str = "sgd", warmup_steps: int = 0, steps: int = 60, seed: int = 0,
        gradients: str = "mean", timeout: float = 60.0) -> Training:
    """Train on ``world_size`` ranks with ``batch_size`` samples each (one ``ddplab.run``)."""
    check(batch_size=batch_size, lr=lr, rule=rule, optimizer=optimizer,
          warmup_steps=warmup_steps, steps=steps, gradients=gradients)
    results = ddplab.run(train, world_size, timeout=timeout,
                         batch_size=batch_size, lr=lr, rule=rule, optimizer=optimizer,
                         warmup_steps=warmup_steps, steps=steps, seed=seed, gradients=gradients)
    first = results[0]
    return Training.from_ranks(
        results,
        world_size=len(results), batch_size=batch_size, lr=lr, rule=rule, optimizer=optimizer,
        warmup_steps=warmup_steps, steps=steps, seed=seed, gradients=gradients,
        lrs=np.array(lr_schedule(lr, rule, len(results), warmup_steps, steps)),
        losses=np.array(first["losses"]), population_losses=np.array(first["population_losses"]),
        diverged_at=first["diverged_at"])


def one_process(global_batch_size: int, lr: float, optimizer: str = "sgd", steps: int = 60,
                seed: int = 0) -> np.ndarray:
    """No DDP, no process group: the losses of one process training on whole global batches."""
    check(batch_size=global_batch_size, lr=lr, optimizer=optimizer, steps=steps)
    model = make_regression_model()
    opt = make_optimizer(optimizer, model.parameters(), lr)
    losses = []
    for t in range(steps):
        X, y = global_batch(seed, t, global_batch_size)
        loss = F.mse_loss(model(X), y)
        opt.zero_grad()
        loss.backward()
        losses.append(loss.item())
        opt.step()
    return np.array(losses)


# ---------------------------------------------------------------- bad input


def check(batch_size=1, lr=0.1, rule="none", optimizer="sgd", warmup_steps=0, steps=1,
          gradients="mean") -> None:
    """Reject bad input in the caller, before any rank is asked to run."""
    positive_int("batch_size", batch_size)
    positive_int("steps", steps)
    positive_number("lr", lr)
    one_of("rule", rule, RULES)
    one_of("optimizer", optimizer, OPTIMIZERS)
    one_of("gradients", gradients, GRADIENTS)
    int_at_least("warmup_steps", warmup_steps, 0)


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--batch-size", type=int, default=4, help="samples per rank")
    parser.add_argument("--lr", type=float, default=0.15,
                        help="learning rate of one process with --batch-size")
    parser.add_argument("--rule", choices=RULES, default="linear",
                        help="scale lr by 1, the world size or its square root")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd")
    parser.add_argument("--warmup-steps", type=int, default=0,
                        help="steps of gradual warmup from lr to the scaled lr")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
