"""Activation checkpointing under DDP: reentrant checkpointing with
``find_unused_parameters=True`` raises "Expected to mark a variable ready only once".

Found by running torch 2.13 (gloo, CPU): with ``checkpoint(..., use_reentrant=True)`` the
checkpointed forward runs under ``no_grad``, so the autograd graph DDP searches after forward
(``find_unused_parameters=True``, ``Reducer::prepare_for_backward``) does not reach the
checkpointed layer's parameters, and DDP lists them as unused. When the first gradient hook of
the backward fires, ``Reducer::autograd_hook`` marks every unused parameter ready; the
reentrant backward then recomputes the layer, its parameters' hooks fire too, and
``Reducer::mark_variable_ready`` raises for a parameter marked twice. (The reducer is C++,
``torch/csrc/distributed/c10d/reducer.cpp``, not shipped in the wheel: read in public copies of
that file; the error itself is run here.)

The fixes, each run here and compared with one process on the whole batch:

- ``use_reentrant=False``: the checkpoint is recorded in the autograd graph, which DDP sees;
- ``static_graph=True``: DDP learns in the first iteration which parameters are used and when,
  and stops searching the graph;
- ``reentrant-no-search``: the reentrant checkpoint under a plain DDP, without
  ``find_unused_parameters=True``: DDP then marks nothing ready after forward, and works when
  every parameter is used and each layer is checkpointed at most once (DDP's docstring,
  ``torch/nn/parallel/distributed.py``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

import ddplab
from ddplab.common.checks import int_in_range, one_of
from ddplab.common.mlp import flat_grad, make_batch, make_model
from ddplab.common.results import Result

SETUPS = ("reentrant", "non-reentrant", "reentrant-static-graph", "reentrant-no-search")
LAYERS = (8, 16, 16, 1)
BATCH = 4


class Checkpointed(torch.nn.Module):
    """The MLP with its middle layer under activation checkpointing."""

    def __init__(self, mlp: torch.nn.Sequential, use_reentrant: bool):
        super().__init__()
        self.mlp = mlp
        self.use_reentrant = use_reentrant

    def forward(self, x):
        first, relu, middle, relu2, last = self.mlp
        h = relu(first(x))
        h = checkpoint(middle, h, use_reentrant=self.use_reentrant)
        return last(relu2(h))


def wrap(model, setup: str) -> DDP:
    """DDP around the checkpointed model, as ``setup`` says."""
    reentrant = setup != "non-reentrant"
    return DDP(Checkpointed(model, reentrant),
               find_unused_parameters=setup != "reentrant-no-search",
               static_graph=setup == "reentrant-static-graph")


# ---------------------------------------------------------------- on every rank


def checkpointed_step(ctx, setup: str, seed: int) -> dict:
    """One backward of the checkpointed model under DDP; raises where torch does."""
    model = make_model(LAYERS, seed).to(ctx.device)
    ddp = wrap(model, setup)
    X, y = make_batch(LAYERS, BATCH, ctx.world_size, seed, 0)
    rows = slice(ctx.rank * BATCH, (ctx.rank + 1) * BATCH)
    F.mse_loss(ddp(X[rows].to(ctx.device)), y[rows].to(ctx.device)).backward()
    return {"grad": flat_grad(model).cpu().numpy()}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class Checkpointing(Result):
    """One setup's outcome: the error's first line, or the gradient against one process."""

    world_size: int
    setup: str
    error: str | None  # the first line of the rank's exception
    max_diff_vs_one_process: float | None

    def describe(self) -> str:
        if self.error:
            return f"{self.setup}: {self.error[:200]}"
        return (f"{self.setup}: ran; largest |DDP - one process| gradient "
                f"{self.max_diff_vs_one_process:.1e}")


def first_line(error: BaseException) -> str:
    """The rank's own exception message: the last 'SomeError: ...' line of its traceback."""
    text = getattr(error, "remote_traceback", "") or str(error)
    lines = [line for line in text.splitlines() if "Error: " in line]
    line = lines[-1] if lines else str(error).splitlines()[0]
    return line.split("Error: ", 1)[1]


def run(world_size: int = 2, setup: str = "reentrant", seed: int = 0,
        timeout: float = 60.0) -> Checkpointing:
    one_of("setup", setup, SETUPS)
    int_in_range("world_size", world_size, 1, 64)
    try:
        results = ddplab.run(checkpointed_step, world_size, timeout=timeout,
                             setup=setup, seed=seed)
    except ddplab.RankError as exc:
        placement = ddplab.placement()  # the run raised: no Ranks came back
        return Checkpointing.from_ranks(placement, world_size, setup, first_line(exc), None)
    model = make_model(LAYERS, seed)
    X, y = make_batch(LAYERS, BATCH, world_size, seed, 0)
    F.mse_loss(model(X), y).backward()
    diff = np.abs(np.stack([r["grad"] for r in results]) - flat_grad(model).numpy()).max()
    return Checkpointing.from_ranks(results, world_size, setup, None, float(diff))
