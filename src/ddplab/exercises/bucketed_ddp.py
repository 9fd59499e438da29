"""Exercise ``bucketed-ddp``: DDP's buckets, written by hand (Stanford CS336 assignment 2's
``DDPBucketed``; picotron's ``DataParallelBucket``).

The reader writes ``class BucketedDDP(torch.nn.Module)`` with ``__init__(module,
bucket_size_mb)``, ``forward(*inputs)`` and ``finish_gradient_synchronization()``. The checker
trains two steps on every rank and passes it when:

* the gradients equal real DDP's on the same shards (``DistributedDataParallel``, same model);
* all-reduces are launched during backward: with more than one bucket, at least one starts
  before the last gradient is ready (the checker's own post-accumulate-grad hooks, registered
  first, count the gradients ready so far);
* their number matches ``bucket_size_mb``: a bucket holds parameters, in reverse order, until
  the next would pass the size. The model's parameters are all one size (4 KiB) and the sizes
  are chosen so that "until the next would pass" and "until it passes" agree.

All-reduces are counted with a spy on ``ProcessGroup.allreduce`` (what ``dist.all_reduce``
calls, ``torch/distributed/distributed_c10d.py``), put in place for the reader's code only.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddplab.common import mlp
from ddplab.exercises import checker
from ddplab.exercises.record import Exercise

WIDTH, LAYERS, BATCH_SIZE, STEPS = 32, 4, 4, 2
PARAM_MB = WIDTH * WIDTH * 4 / 2**20  # every parameter: a 32 x 32 float32 weight


class BucketedDDP(torch.nn.Module):
    """The answer: buckets of parameters in reverse order; a hook per parameter launches its
    bucket's all-reduce (async) as soon as the bucket's last gradient is ready; finishing waits
    for them and copies the averages back."""

    def __init__(self, module: torch.nn.Module, bucket_size_mb: float):
        super().__init__()
        self.module = module
        cap = bucket_size_mb * 2**20
        self.buckets, size = [[]], 0
        for p in reversed([p for p in module.parameters() if p.requires_grad]):
            nbytes = p.numel() * p.element_size()
            if self.buckets[-1] and size + nbytes > cap:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += nbytes
        self.bucket_of = {p: i for i, b in enumerate(self.buckets) for p in b}
        self.pending, self.ready = [], [0] * len(self.buckets)
        for p in self.bucket_of:
            p.register_post_accumulate_grad_hook(self._grad_ready)

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

    def _grad_ready(self, p):
        i = self.bucket_of[p]
        self.ready[i] += 1
        if self.ready[i] == len(self.buckets[i]):
            flat = torch.cat([q.grad.flatten() for q in self.buckets[i]])
            self.pending.append((i, flat, dist.all_reduce(flat, async_op=True)))

    def finish_gradient_synchronization(self):
        for i, flat, work in self.pending:
            work.wait()
            flat /= dist.get_world_size()
            offset = 0
            for q in self.buckets[i]:
                q.grad.copy_(flat[offset:offset + q.numel()].view_as(q.grad))
                offset += q.numel()
        self.pending, self.ready = [], [0] * len(self.buckets)


def cases(world_size: int) -> list[tuple[int, dict]]:
    return [(world_size, {"bucket_params": 2.5, "seed": 0}),
            (world_size, {"bucket_params": 0.5, "seed": 1}),
            (world_size + 1, {"bucket_params": 1000.0, "seed": 2})]


def expected_buckets(bucket_params: float) -> int:
    """Buckets of equal parameters, each closed before the next parameter would pass the cap."""
    return math.ceil(LAYERS / max(1, math.floor(bucket_params)))


def make_model(seed: int) -> torch.nn.Sequential:
    """``LAYERS`` Linear(WIDTH, WIDTH) without bias, Tanh between: equal parameters, so the
    buckets a cap gives can be counted by hand."""
    return mlp.make_model((WIDTH,) * (LAYERS + 1), seed, activation=torch.nn.Tanh, bias=False)


def on_rank(ctx, solution, call_id: str, bucket_params: float, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)  # drawn on the host, the same on every machine
    shard = slice(ctx.rank * BATCH_SIZE, (ctx.rank + 1) * BATCH_SIZE)
    data = [tuple(torch.randn(BATCH_SIZE * ctx.world_size, WIDTH, generator=g)[shard]
                  .to(ctx.device) for _ in range(2)) for _ in range(STEPS)]
    reference, want = DDP(make_model(seed).to(ctx.device)), []
    for X, y in data:
        reference.zero_grad(set_to_none=True)
        F.mse_loss(reference(X), y).backward()
        want.append({n: p.grad.clone() for n, p in reference.module.named_parameters()})
    model = make_model(seed).to(ctx.device)  # the reader's buckets are on the rank's device
    ready = [0]
    for p in model.parameters():  # registered before the reader's: they run first
        p.register_post_accumulate_grad_hook(lambda p: ready.__setitem__(0, ready[0] + 1))
    launches, got = [], []
    checker.enter(call_id, ctx.rank)
    with checker.watching_allreduce(lambda *_, **__: launches[-1].append(ready[0])):
        ddp = solution(model, bucket_size_mb=bucket_params * PARAM_MB)
        for X, y in data:
            model.zero_grad(set_to_none=True)
            ready[0] = 0
            launches.append([])
            F.mse_loss(ddp(X), y).backward()
            ddp.finish_gradient_synchronization()
            got.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    checker.leave(call_id, ctx.rank)
    return {"got": got, "want": want, "launches": launches}


ADDED_TWICE = ("the gradient was added twice: a hook registered with register_hook runs "
               "before autograd accumulates the gradient, so a .grad it writes gets the "
               "gradient added to it again. Let autograd write .grad and start the bucket from "
               "register_post_accumulate_grad_hook.")


def hints(world_size: int) -> dict:
    """Factor -> what a gradient that many times the right one means."""
    summed = f"summed over the ranks but not divided by the world size ({world_size})"
    if world_size == 2:
        return {2: f"{summed}; or {ADDED_TWICE}"}
    return {world_size: f"{summed}.", 2: ADDED_TWICE}


def judge(world_size: int, params: dict, results: list) -> str | None:
    buckets = expected_buckets(params["bucket_params"])
    mb = params["bucket_params"] * PARAM_MB
    where = (f"world size {world_size}, bucket_size_mb={mb:.4g} ({LAYERS} parameters of "
             f"{PARAM_MB * 2**20 / 1024:.0f} KiB: {buckets} bucket{'s' * (buckets > 1)})")
    for step in range(STEPS):
        at = f"{where}, step {step + 1}"
        launched = results[0]["launches"][step]
        if len(launched) != buckets:
            if step and len(results[0]["launches"][0]) == buckets:
                return (f"{at}: {len(launched)} all-reduces on rank 0, expected {buckets}, "
                        f"one per bucket, while step 1 launched {buckets}: what counts the "
                        "gradients ready in each bucket (or remembers the buckets launched) "
                        "kept its value from step 1. Reset that state for the next step, in "
                        "finish_gradient_synchronization().")
            return (f"{at}: {len(launched)} all-reduces on rank 0, expected {buckets}, one per "
                    "bucket" + (": one per parameter is not bucketing." if len(launched) ==
                                LAYERS else "."))
        if buckets > 1 and min(launched) >= LAYERS:
            return (f"{at}: every all-reduce started after backward had produced all "
                    f"{LAYERS} gradients, so none overlapped with backward: launch a bucket's "
                    "all-reduce (async_op=True) from a gradient hook as soon as its last "
                    "gradient is ready, and wait in finish_gradient_synchronization().")
        problem = checker.compare_grads([r["got"][step] for r in results],
                                        results[0]["want"][step], hints(world_size), at)
        if problem:
            return problem
    return None


EXERCISE = Exercise(
    name="bucketed-ddp", lab="labs/04_buckets.ipynb", function="BucketedDDP",
    signature=("class BucketedDDP(torch.nn.Module): __init__(module, bucket_size_mb), forward, "
               "finish_gradient_synchronization()"),
    against="DistributedDataParallel, all-reduces launched during backward, one per bucket",
    answer=BucketedDDP, cases=cases, on_rank=on_rank, judge=judge)
