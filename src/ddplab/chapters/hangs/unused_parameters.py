"""Unused parameters: a parameter that gets no gradient leaves its bucket incomplete, and DDP
refuses to start the next iteration.

DDP's reducer all-reduces a bucket once every gradient in it is ready. A parameter outside the
forward's graph never becomes ready, the reduction never finishes, and the next forward raises
"Expected to have finished reduction in the prior iteration before starting a new one"
(``Reducer::ensure_prior_reduction_finished``, ``torch/csrc/distributed/c10d/reducer.cpp``).
``find_unused_parameters=True`` makes DDP walk the autograd graph from the outputs after every
forward and mark what it does not reach as ready; that walk, and the all-reduce of the
used-parameter map, cost time on every step, used parameters or not.
"""

from __future__ import annotations

import dataclasses
import textwrap

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common import timed_step
from ddplab.common.checks import an_int, int_in_range, positive_int
from ddplab.common.mlp import make_model
from ddplab.common.results import Result

FEATURES = 8


class WithAuxHead(torch.nn.Module):
    """A trunk and a head; ``aux`` is registered but only used when asked (a second task's
    head, a frozen branch): its parameters get no gradient in the default forward."""

    def __init__(self):
        super().__init__()
        self.trunk = torch.nn.Linear(FEATURES, 16)
        self.head = torch.nn.Linear(16, 1)
        self.aux = torch.nn.Linear(16, 1)

    def forward(self, X, use_aux: bool = False):
        h = torch.relu(self.trunk(X))
        return self.head(h) + (self.aux(h) if use_aux else 0)


# ---------------------------------------------------------------- on every rank


def two_steps(ctx, find_unused_parameters: bool, seed: int, detail: bool = False) -> dict:
    """Two training steps of ``WithAuxHead`` without its aux head; DDP's error, if any.
    ``detail``: DDP built under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``'s level (the reducer reads
    it when it is made; the group stays unwrapped), so that its error names the parameters."""
    torch.manual_seed(seed)
    model = WithAuxHead().to(ctx.device)
    level = dist.get_debug_level()
    if detail:
        dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        ddp = DDP(model, find_unused_parameters=find_unused_parameters)
    finally:
        dist.set_debug_level(level)  # the pool's ranks are reused
    g = torch.Generator().manual_seed(seed + ctx.rank)
    done = 0
    try:
        for _ in range(2):
            X, y = torch.randn(8, FEATURES, generator=g), torch.randn(8, 1, generator=g)
            F.mse_loss(ddp(X.to(ctx.device)), y.to(ctx.device)).backward()
            done += 1
        error = None
    except RuntimeError as exc:
        error = str(exc)
    return {"steps_done": done, "error": error,
            "aux_grad_is_none": model.aux.weight.grad is None}


def step_times(ctx, layers, steps: int, batch_size: int, seed: int) -> dict:
    """Per flag, this rank's SGD steps of the same MLP under DDP with and without
    ``find_unused_parameters`` (``timed_step.timed``), alternating so that both see the same
    machine load."""
    models = {flag: make_model(layers, seed).to(ctx.device) for flag in (False, True)}
    ddps = {flag: DDP(model, find_unused_parameters=flag) for flag, model in models.items()}
    optimizers = {flag: torch.optim.SGD(model.parameters(), lr=1e-3)
                  for flag, model in models.items()}
    g = torch.Generator().manual_seed(seed + ctx.rank)
    X = torch.randn(batch_size, layers[0], generator=g).to(ctx.device)
    y = torch.randn(batch_size, layers[-1], generator=g).to(ctx.device)

    def step(flag):
        optimizers[flag].zero_grad()
        F.mse_loss(ddps[flag](X), y).backward()
        optimizers[flag].step()

    times = {False: [], True: []}
    for i in range(steps + 2):  # the first two steps build and rebuild the buckets
        for flag in ddps:
            record = timed_step.timed(step, ctx.device, flag)
            if i >= 2:
                times[flag].append(record)
    return {"without": times[False], "with": times[True]}


def error_and_step_times(ctx, layers, steps: int, batch_size: int, seed: int) -> dict:
    """DDP's error without the flag, two steps with it, then the step times: one call to the
    ranks rather than three (each call is a round trip to every rank, about 10-40 ms on a
    busy 2-core machine, a slider move's budget)."""
    return {"unflagged": two_steps(ctx, find_unused_parameters=False, seed=seed),
            "flagged": two_steps(ctx, find_unused_parameters=True, seed=seed),
            **step_times(ctx, layers, steps, batch_size, seed)}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class UnusedParameters(Result):
    world_size: int
    error: str | None  # DDP's error without find_unused_parameters, as rank 0 saw it
    steps_done: int  # steps completed before it
    steps_done_with_flag: int  # with find_unused_parameters=True
    aux_grad_is_none: bool  # the unused head's gradient with the flag (None: never touched)
    layers: tuple  # the MLP the step time is measured on
    ms_without: list[float]  # per step, ms (the slowest rank's), find_unused_parameters=False
    ms_with: list[float]  # ... True

    json_extras = ("median_ms_without", "median_ms_with")

    @property
    def median_ms_without(self) -> float:
        return timed_step.middle(self.ms_without)

    @property
    def median_ms_with(self) -> float:
        return timed_step.middle(self.ms_with)

    def describe(self) -> str:
        first = (self.error or "none").split(". ")[0]
        return "\n".join(textwrap.fill(line, 78, subsequent_indent="  ") for line in [
            f"without find_unused_parameters: {self.steps_done} step(s), then: {first}.",
            f"with find_unused_parameters=True: {self.steps_done_with_flag} steps; the unused "
            f"head's gradient is {'None' if self.aux_grad_is_none else 'a tensor'}",
            f"MLP {','.join(map(str, self.layers))}, median SGD step (the slowest rank's): "
            f"{self.median_ms_without:.2f} ms without the flag, {self.median_ms_with:.2f} ms "
            f"with it ({len(self.ms_with)} steps each, alternating)"])


def run(world_size: int = 2, layers=(32,) * 13, steps: int = 30, batch_size: int = 8,
        seed: int = 0, timeout: float = 60.0) -> UnusedParameters:
    int_in_range("world_size", world_size, 1, ddplab.MAX_WORLD_SIZE)
    positive_int("steps", steps)
    positive_int("batch_size", batch_size)
    an_int("seed", seed)
    layers = tuple(layers)
    ranks = ddplab.run(error_and_step_times, world_size, timeout=timeout,
                       layers=layers, steps=steps, batch_size=batch_size, seed=seed)
    without, flagged = ranks[0]["unflagged"], ranks[0]["flagged"]  # as rank 0 saw them
    ms = {key: [1e3 * s for s in timed_step.slowest_steps([r[key] for r in ranks])]
          for key in ("without", "with")}
    return UnusedParameters.from_ranks(
        ranks,
        world_size=world_size, error=without["error"], steps_done=without["steps_done"],
        steps_done_with_flag=flagged["steps_done"],
        aux_grad_is_none=flagged["aux_grad_is_none"], layers=layers,
        ms_without=ms["without"], ms_with=ms["with"])


def named(world_size: int = 2, seed: int = 0) -> str:
    """DDP's error for the unused head under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, rank 0's: it
    ends by naming the parameters that got no gradient."""
    int_in_range("world_size", world_size, 1, ddplab.MAX_WORLD_SIZE)
    ranks = ddplab.run(two_steps, world_size, find_unused_parameters=False, seed=seed,
                       detail=True)
    return ranks[0]["error"]
