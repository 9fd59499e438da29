"""Exercise ``accumulate``: gradient accumulation under DDP, all-reduced once per step.

The reader writes ``accumulate_step(ddp_model, micro_batches, loss_fn)``: forward and backward
over a list of ``(x, y)``. It passes when the gradients equal one process's on the whole global
batch (mean loss), and DDP all-reduced exactly once: the checker registers a comm hook on the
DDP model that counts its calls and then does what DDP's default does (divide by the world size,
all-reduce; ``allreduce_hook`` in ``torch/distributed/algorithms/ddp_comm_hooks/
default_hooks.py``). The model is small, so DDP holds it in one bucket: one hook call per sync.
"""

from __future__ import annotations

import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddplab.common.mlp import make_batch, make_model
from ddplab.exercises import checker
from ddplab.exercises.record import Exercise

LAYERS = (8, 16, 4)
MICRO_BATCH_SIZE = 2


def accumulate_step(ddp_model, micro_batches, loss_fn) -> None:
    """The answer: all but the last backward inside ``no_sync`` (gradients add up locally),
    the last outside it (DDP all-reduces the sum), every loss divided by the number of
    micro-batches so that the sum is a mean."""
    *first, last = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()
    x, y = last
    (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()


def cases(world_size: int) -> list[tuple[int, dict]]:
    return [(world_size, {"micro_batches": 4, "seed": 0}),
            (world_size + 1, {"micro_batches": 2, "seed": 1}),
            (world_size, {"micro_batches": 3, "seed": 2})]


def counting_allreduce(state: dict, bucket):
    """DDP's default reduction, counted: divide by the world size, all-reduce (a sum)."""
    state["calls"] += 1
    tensor = bucket.buffer().div_(dist.get_world_size())
    work = dist.all_reduce(tensor, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def on_rank(ctx, solution, call_id: str, micro_batches: int, seed: int) -> dict:
    per_rank = micro_batches * MICRO_BATCH_SIZE
    X, y = (t.to(ctx.device) for t in make_batch(LAYERS, per_rank, ctx.world_size, seed, 0))
    whole = make_model(LAYERS, seed).to(ctx.device)
    F.mse_loss(whole(X), y).backward()
    ddp_model = DDP(make_model(LAYERS, seed).to(ctx.device))
    state = {"calls": 0}
    ddp_model.register_comm_hook(state, counting_allreduce)
    mine = X[ctx.rank * per_rank:(ctx.rank + 1) * per_rank], y[ctx.rank * per_rank:
                                                                (ctx.rank + 1) * per_rank]
    micro = [(mine[0][i:i + MICRO_BATCH_SIZE], mine[1][i:i + MICRO_BATCH_SIZE])
             for i in range(0, per_rank, MICRO_BATCH_SIZE)]
    checker.enter(call_id, ctx.rank)
    solution(ddp_model, micro, F.mse_loss)
    checker.leave(call_id, ctx.rank)
    return {"got": {n: p.grad for n, p in ddp_model.module.named_parameters()
                    if p.grad is not None},
            "want": {n: p.grad for n, p in whole.named_parameters()},
            "all_reduces": state["calls"]}


def judge(world_size: int, params: dict, results: list) -> str | None:
    m = params["micro_batches"]
    where = f"world size {world_size}, {m} micro-batches, seed {params['seed']}"
    counts = [r["all_reduces"] for r in results]
    if not results[0]["got"]:
        return (f"{where}: no parameter has a gradient: run forward and backward "
                "(loss_fn(ddp_model(x), y).backward()) on every micro-batch.")
    if counts[0] == 0:
        return (f"{where}: DDP never all-reduced, so each rank kept its own gradient: the "
                "last micro-batch's backward must run outside ddp_model.no_sync(), where DDP "
                "all-reduces what the micro-batches accumulated.")
    if counts[0] == m:
        return (f"{where}: DDP all-reduced {m} times in one step, once per micro-batch: run "
                "every backward but the last inside ddp_model.no_sync().")
    if counts[0] != 1:
        return (f"{where}: DDP all-reduced {counts[0]} times in one step (rank 0); once is "
                "enough: no_sync() for all but the last micro-batch.")
    hints = {m: f"each micro-batch's loss was not divided by the number of micro-batches "
                f"({m}): backward adds into .grad, so the {m} gradients were summed.",
             world_size: f"summed over the ranks but not divided by the world size "
                         f"({world_size}).",
             1 / m: f"divided by the number of micro-batches ({m}) twice."}
    return checker.compare_grads([r["got"] for r in results], results[0]["want"], hints, where)


EXERCISE = Exercise(
    name="accumulate", lab="labs/05_time_cost.ipynb", function="accumulate_step",
    signature="accumulate_step(ddp_model, micro_batches, loss_fn)",
    against="one process on the whole global batch, with one all-reduce per step",
    answer=accumulate_step, cases=cases, on_rank=on_rank, judge=judge)
