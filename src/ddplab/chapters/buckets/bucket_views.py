"""``gradient_as_bucket_view``: gradients as views into DDP's buckets, one copy of memory.

    from ddplab.chapters.buckets import bucket_views
    views = bucket_views.views()   # gradient memory with and without bucket views

``gradient_as_bucket_view=True`` makes every ``param.grad`` a view into its bucket's flat
buffer, so the gradients and the buckets share one copy of memory instead of two
(torch/nn/parallel/distributed.py, the argument's docstring; reducer.cpp,
``mark_variable_ready_dense``: "Let grad point to bucket_view buffer"). ``no_sync``
accumulation is the chapter "The time cost"'s (``chapters.time_cost.accumulation``).
"""

from __future__ import annotations

import dataclasses

import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common import hooks, mlp
from ddplab.common.checks import positive_int
from ddplab.common.results import Result


def keep_buffers(state, bucket):
    """``hooks.record_and_allreduce``, keeping each bucket's flat buffer in ``state.buffers``."""
    state.buffers[bucket.index()] = bucket.buffer()
    return hooks.record_and_allreduce(state, bucket)


def _storage(tensor) -> tuple[int, int]:
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def measure_views(ctx, layers, gradient_as_bucket_view: bool, set_to_none: bool,
                  iterations: int, batch_size: int, seed: int) -> dict:
    """After the last of ``iterations`` steps: bytes of bucket buffers and of gradients kept
    apart from them, how many gradients are bucket views, and how many autograd accumulated
    straight into their bucket (no copy by DDP)."""
    model = mlp.make_model(layers, seed).to(ctx.device)
    ddp = DDP(model, gradient_as_bucket_view=gradient_as_bucket_view)
    log = hooks.BucketLog(model, ctx.world_size)
    log.buffers = {}
    ddp.register_comm_hook(log, keep_buffers)
    in_place = []

    def accumulated(param):  # the buffers noted on the previous iteration are still DDP's
        bucket_ptrs = {_storage(b)[0] for b in log.buffers.values()}
        in_place[-1] += _storage(param.grad)[0] in bucket_ptrs

    for param in model.parameters():
        param.register_post_accumulate_grad_hook(accumulated)
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    for i in range(iterations):
        X, y = (t[rows].to(ctx.device)
                for t in mlp.make_batch(layers, batch_size, ctx.world_size, seed, i))
        ddp.zero_grad(set_to_none=set_to_none)
        in_place.append(0)
        F.mse_loss(ddp(X), y).backward()
    bucket_storages = dict(_storage(b) for b in log.buffers.values())
    grad_storages = dict(_storage(p.grad) for p in model.parameters())
    return {"bucket_bytes": sum(bucket_storages.values()),
            "separate_grad_bytes": sum(n for ptr, n in grad_storages.items()
                                       if ptr not in bucket_storages),
            "views": sum(_storage(p.grad)[0] in bucket_storages for p in model.parameters()),
            "accumulated_in_place": in_place[-1], "grad": mlp.flat_grad(model)}


@dataclasses.dataclass
class Views(Result):
    """One row per (gradient_as_bucket_view, set_to_none), measured after the last step."""

    layers: tuple
    world_size: int
    iterations: int
    param_count: int
    param_bytes: int
    rows: list[dict]

    def describe(self) -> str:
        """One line per setting: bucket bytes, gradient bytes kept apart from the buckets,
        gradients that are bucket views, and gradients accumulated straight into a bucket."""
        lines = [f"parameters: {self.param_count} tensors, {self.param_bytes:,} bytes",
                 "as_bucket_view set_to_none  buckets B  other grads B  views  in place"]
        lines += [f"{r['gradient_as_bucket_view']!s:<14} {r['set_to_none']!s:<11} "
                  f"{r['bucket_bytes']:>10,} {r['separate_grad_bytes']:>14,} "
                  f"{r['views']:>6} {r['accumulated_in_place']:>9}" for r in self.rows]
        return "\n".join(lines)

    def row(self, gradient_as_bucket_view: bool, set_to_none: bool) -> dict:
        return next(r for r in self.rows if r["gradient_as_bucket_view"] == gradient_as_bucket_view
                    and r["set_to_none"] == set_to_none)


def views(layers=mlp.DEFAULT_LAYERS, world_size: int = 2, iterations: int = 3,
          batch_size: int = 32, seed: int = 0) -> Views:
    """Measure ``measure_views`` for each of the four settings (rank 0's figures)."""
    layers = mlp.check_layers(layers)
    for name, value in (("iterations", iterations), ("batch_size", batch_size)):
        positive_int(name, value)
    rows = []
    for as_view in (False, True):
        for set_to_none in (False, True):
            ranks = ddplab.run(measure_views, world_size, layers=layers,
                               gradient_as_bucket_view=as_view, set_to_none=set_to_none,
                               iterations=iterations, batch_size=batch_size, seed=seed)
            rows.append({"gradient_as_bucket_view": as_view, "set_to_none": set_to_none,
                         **{k: v for k, v in ranks[0].items() if k != "grad"},
                         "grads": [r["grad"] for r in ranks]})
    model = mlp.make_model(layers, seed)
    return Views.from_ranks(ddplab.placement(), layers=layers, world_size=world_size,
                            iterations=iterations, param_count=len(list(model.parameters())),
                            param_bytes=sum(4 * p.numel() for p in model.parameters()), rows=rows)
