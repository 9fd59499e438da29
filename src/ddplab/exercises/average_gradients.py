"""Exercise ``average-gradients``: what DDP does after backward, written by hand.

The reader writes ``average_gradients(model)``. Every rank builds the same model, runs forward
and ``loss.backward()`` on its own shard of the global batch (mean loss), then calls it. It
passes when every rank's gradients equal the gradient one process gets from the whole global
batch (mean loss), on several world sizes and seeds: all-reduce (a sum) and divide by the world
size, as picotron's ``DataParallelNaive`` does.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddplab.common.mlp import make_batch, make_model
from ddplab.exercises import checker
from ddplab.exercises.record import Exercise

LAYERS = (8, 16, 4)
BATCH_SIZE = 4  # samples per rank


def average_gradients(model: torch.nn.Module) -> None:
    """The answer: every gradient summed over the ranks, then divided by their number."""
    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= world_size


def cases(world_size: int) -> list[tuple[int, dict]]:
    """(world size, parameters) of each case: the size asked for and one more, two seeds."""
    return [(world_size, {"seed": 0}), (world_size + 1, {"seed": 1}),
            (world_size, {"seed": 2})]


def on_rank(ctx, solution, call_id: str, seed: int) -> dict:
    """This rank's gradients after ``solution``, and the one-process gradient of the whole
    batch (computed here too, by every rank alone: no collective follows the reader's)."""
    X, y = (t.to(ctx.device) for t in make_batch(LAYERS, BATCH_SIZE, ctx.world_size, seed, 0))
    whole = make_model(LAYERS, seed).to(ctx.device)
    F.mse_loss(whole(X), y).backward()
    model = make_model(LAYERS, seed).to(ctx.device)  # the reader all-reduces on its device
    shard = slice(ctx.rank * BATCH_SIZE, (ctx.rank + 1) * BATCH_SIZE)
    F.mse_loss(model(X[shard]), y[shard]).backward()
    local = {n: p.grad.clone() for n, p in model.named_parameters()}
    checker.enter(call_id, ctx.rank)
    solution(model)
    checker.leave(call_id, ctx.rank)
    return {"got": {n: p.grad for n, p in model.named_parameters() if p.grad is not None},
            "want": {n: p.grad for n, p in whole.named_parameters()}, "local": local}


def judge(world_size: int, params: dict, results: list) -> str | None:
    where = f"world size {world_size}, seed {params['seed']}"
    hints = {world_size: f"summed over the ranks but not divided by the world size "
                         f"({world_size}).",
             1 / world_size: "divided by the world size twice, or divided without summing.",
             1.0 / world_size ** 2: "divided by the world size three times?"}
    if world_size == 1:
        hints = {}
    for rank, result in enumerate(results):
        for name, local in result["local"].items():
            got = result["got"].get(name)
            if got is None or np.allclose(got, result["want"][name], rtol=1e-4, atol=1e-6):
                continue
            if np.allclose(got, local, rtol=1e-4, atol=1e-7):
                return (f"{where}: the gradient of {name!r} on rank {rank} is still that rank's "
                        "own: it was never all-reduced.")
            if np.allclose(got, local / world_size, rtol=1e-4, atol=1e-7):
                return (f"{where}: the gradient of {name!r} on rank {rank} is that rank's own "
                        f"divided by {world_size}: divided, but never summed over the ranks "
                        "(dist.all_reduce).")
    return checker.compare_grads([r["got"] for r in results], results[0]["want"], hints, where)


EXERCISE = Exercise(
    name="average-gradients", lab="labs/01_averaging.ipynb", function="average_gradients",
    signature="average_gradients(model)",
    against="one process on the whole batch",
    answer=average_gradients, cases=cases, on_rank=on_rank, judge=judge)
