"""What ``Join`` costs per step: the all-reduces DDP's forward starts under it, counted.

Every rank runs ``steps`` forwards of DDP (each with its backward and an SGD step) on equal
data, and a spy on ``ProcessGroup.allreduce`` (``ddplab.common.process_group_spy``) counts the
all-reduces started from Python during each forward: none without Join. Under ``Join([ddp])``
``DistributedDataParallel._pre_forward`` (``torch/nn/parallel/distributed.py``) starts

* ``Join.notify_join_context(self)`` (line 1762 in torch 2.13): an all-reduce of a one, so
  that joined ranks know someone still trains (``torch/distributed/algorithms/join.py``);
* ``self._check_global_requires_backward_grad_sync(is_joined_rank=False)`` (lines 1784-1786):
  an all-reduce telling joined ranks whether this backward syncs (``no_sync`` or not);

both asynchronous. With ``Join(..., throw_on_early_termination=True)``,
``notify_join_context`` adds a third, which it waits for: an all-reduce of a zero that a
joined rank answers with a one, so every rank raises as soon as one has run out.
The backward's bucket all-reduces come from DDP's reducer in C++ and are not counted.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch
import torch.nn.functional as F
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.checks import int_in_range
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.process_group_spy import watching
from ddplab.common.results import Result

LAYERS = (8, 16, 1)
SETTINGS = ("no Join", "Join", "Join, throw_on_early_termination")


def all_reduces_per_forward(ctx, steps: int) -> dict:
    """For each setting, the all-reduces each forward started (a list, one per step)."""
    return {setting: _count(ctx, setting, steps) for setting in SETTINGS}


def _count(ctx, setting: str, steps: int) -> list[int]:
    model = make_model(LAYERS, seed=0).to(ctx.device)
    ddp = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    join = contextlib.nullcontext() if setting == "no Join" else Join(
        [ddp], throw_on_early_termination=setting.endswith("termination"))
    started = []

    def see(*_, **__):
        started[-1] += 1

    with join:
        for step in range(steps):
            X, y = make_batch(LAYERS, 4, ctx.world_size, 0, step)
            rows = slice(ctx.rank * 4, (ctx.rank + 1) * 4)
            started.append(0)
            with watching(see, "allreduce"):  # the forward only
                output = ddp(X[rows].to(ctx.device))
            optimizer.zero_grad()
            F.mse_loss(output, y[rows].to(ctx.device)).backward()
            optimizer.step()
    return started


@dataclasses.dataclass
class JoinCost(Result):
    world_size: int
    steps: int
    per_forward: dict  # setting -> all-reduces started in each forward, rank 0

    def extra(self, setting: str) -> int:
        """All-reduces per forward, the same in every step (else ValueError)."""
        counts = set(self.per_forward[setting])
        if len(counts) != 1:
            raise ValueError(f"{setting}: not the same in every forward: "
                             f"{self.per_forward[setting]}")
        return counts.pop()

    def describe(self) -> str:
        return "\n".join(f"{setting:<34} {self.extra(setting)} all-reduce(s) started in each "
                         f"forward" for setting in SETTINGS)


def run(world_size: int = 2, steps: int = 3, timeout: float = 60.0) -> JoinCost:
    """Count the all-reduces DDP's forward starts, without Join and under it."""
    int_in_range("world_size", world_size, 2, 64)
    int_in_range("steps", steps, 1, 100)
    results = ddplab.run(all_reduces_per_forward, world_size, timeout=timeout,
                         steps=steps)
    if any(r != results[0] for r in results):
        raise RuntimeError(f"ranks counted differently: {results}")
    return JoinCost.from_ranks(results, world_size=world_size, steps=steps, per_forward=results[0])
