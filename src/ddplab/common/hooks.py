"""Hooks that several chapters put on DDP, or in its place: naive data parallel (one
all-reduce per parameter) and a comm hook that records every bucket DDP launches.

The naive version first, as picotron does (``DataParallelNaive`` before ``DataParallelBucket``,
huggingface/picotron, data_parallel/data_parallel.py).
"""

from __future__ import annotations

import functools
import time

import torch.distributed as dist


class NaiveAllReduce:
    """Naive data parallel: once autograd has accumulated a gradient,
    all-reduce it (SUM), then divide by the world size. One blocking
    call per parameter.

    As picotron's ``DataParallelNaive`` (huggingface/picotron,
    data_parallel.py). ``register_post_accumulate_grad_hook`` runs
    once the gradient is in ``param.grad``.
    """

    def __init__(self, model, world_size: int):
        self.world_size, self.iteration = world_size, 0
        self.calls = []
        for name, param in model.named_parameters():
            hook = functools.partial(self.all_reduce, name)
            param.register_post_accumulate_grad_hook(hook)

    def all_reduce(self, name, param):
        start = time.perf_counter()
        dist.all_reduce(param.grad)
        param.grad /= self.world_size
        self.calls.append({
            "iteration": self.iteration, "param": name,
            "start": start, "end": time.perf_counter(),
            "bytes": param.grad.numel() * param.grad.element_size()})


class BucketLog:
    """The state of ``record_and_allreduce``: every bucket DDP handed to the hook, in order."""

    def __init__(self, model, world_size: int):
        self.names = {id(p): name for name, p in model.named_parameters()}
        self.world_size, self.iteration, self.buckets = world_size, 0, []


def record_and_allreduce(state, bucket):
    """A DDP comm hook: note the bucket DDP launches, then do what DDP
    does without a hook.

    DDP calls it once per bucket, in bucket order: a bucket whose gradients
    are all ready waits until every bucket before it has been launched
    (reducer.cpp, ``mark_bucket_ready``: "Buckets are reduced in
    sequence"). Its bucket
    is *not* divided by the world size (reducer.cpp,
    ``mark_variable_ready_dense`` divides only without a hook), so it
    divides, then all-reduces a sum, as ``allreduce_hook`` does
    (torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py).
    """
    buffer = bucket.buffer()
    names = [state.names[id(p)] for p in bucket.parameters()]
    entry = {"iteration": state.iteration, "index": bucket.index(),
             "params": names,
             "numel": buffer.numel(),
             "bytes": buffer.numel() * buffer.element_size(),
             "launch": time.perf_counter(), "done": None}
    state.buckets.append(entry)
    buffer.div_(state.world_size)

    def finished(fut):
        entry["done"] = time.perf_counter()
        return fut.value()[0]

    work = dist.all_reduce(buffer, async_op=True)
    return work.get_future().then(finished)


def watch_ready_order(model, log: list) -> None:
    """Append each parameter's name to ``log[-1]`` when autograd has accumulated its gradient."""
    for name, param in model.named_parameters():
        param.register_post_accumulate_grad_hook(lambda _, name=name: log[-1].append(name))
