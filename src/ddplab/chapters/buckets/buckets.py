"""What is a gradient bucket, and which buckets does DDP all-reduce on each iteration?

    python -m ddplab buckets --layers 64,1024,1024,10 --iterations 3 --world-size 2 --json
    python -m ddplab buckets --layers 64,1024,1024,10 --bucket-cap-mb 0.01 --static-graph
    torchrun --nproc-per-node 2 -m ddplab buckets --layers 64,1024,1024,10 --json

Every rank runs the same MLP (``nn.Linear`` layers of the given widths, float32 with bias, ReLU
between them) three ways on the same batches: naive data parallel (``NaiveAllReduce``: one
all-reduce per parameter from a gradient hook), DDP with a comm hook that records every bucket
as DDP launches it (``record_and_allreduce``), and plain DDP without a hook, the reference the
hook must not change. Construction-time logging is no record of the buckets: DDP rebuilds them
after the first iteration and ``_get_ddp_logging_data()["bucket_sizes"]`` keeps the old sizes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.bucket_rule import bucket_limits, check_cap
from ddplab.common.checks import positive_int
from ddplab.common.hooks import (
    BucketLog,
    NaiveAllReduce,
    record_and_allreduce,
    watch_ready_order,
)
from ddplab.common.mlp import DEFAULT_LAYERS, check_layers, flat_grad, make_batch, make_model
from ddplab.common.results import Result

COMMAND = "buckets"  # python -m ddplab buckets

# ---------------------------------------------------------------- on every rank


def record(ctx, layers, bucket_cap_mb, iterations: int, find_unused_parameters: bool,
           static_graph: bool, gradient_as_bucket_view: bool, batch_size: int,
           seed: int) -> dict:
    """Naive, hooked DDP and plain DDP on the same batches; what each all-reduced, and when."""
    options = dict(bucket_cap_mb=bucket_cap_mb, find_unused_parameters=find_unused_parameters,
                   static_graph=static_graph, gradient_as_bucket_view=gradient_as_bucket_view)
    naive_model = make_model(layers, seed).to(ctx.device)
    naive = NaiveAllReduce(naive_model, ctx.world_size)
    model = make_model(layers, seed).to(ctx.device)
    ddp = DDP(model, **options)  # keep the wrappers referenced until backward is done
    log = BucketLog(model, ctx.world_size)
    ddp.register_comm_hook(log, record_and_allreduce)
    plain_model = make_model(layers, seed).to(ctx.device)
    plain = DDP(plain_model, **options)
    ready_order: list = []
    watch_ready_order(plain_model, ready_order)
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    diff = {"hook": 0.0, "naive": 0.0}
    for i in range(iterations):
        X, y = (t[rows].to(ctx.device) for t in make_batch(layers, batch_size, ctx.world_size,
                                                            seed, i))
        naive.iteration = log.iteration = i
        ready_order.append([])
        for m, wrapped in ((naive_model, naive_model), (model, ddp), (plain_model, plain)):
            m.zero_grad()
            F.mse_loss(wrapped(X), y).backward()
        reference = flat_grad(plain_model)
        for key, m in (("hook", model), ("naive", naive_model)):
            diff[key] = max(diff[key], (flat_grad(m) - reference).abs().max().item())
    logging = ddp._get_ddp_logging_data()
    return {"buckets": log.buckets, "naive_calls": naive.calls, "ready_order": ready_order,
            "grad": flat_grad(model), "diff": diff,
            "logged_sizes": _sizes(logging.get("bucket_sizes")),
            "logged_rebuilt_sizes": _sizes(logging.get("rebuilt_bucket_sizes"))}


def _sizes(text) -> list[int] | None:
    return None if text is None else [int(s) for s in str(text).split(",")]


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class Buckets(Result):
    """What DDP all-reduced on each iteration, bucket by bucket, next to naive data parallel."""

    layers: tuple
    world_size: int
    bucket_cap_mb: float | None
    find_unused_parameters: bool
    static_graph: bool
    gradient_as_bucket_view: bool
    param_names: list[str]  # registration order (model.named_parameters())
    param_numels: list[int]
    layouts: list[list[dict]]  # per iteration, per bucket in launch order (rank 0)
    naive_calls: list[list[dict]]  # per iteration, per naive all-reduce call (rank 0)
    ready_order: list[str]  # parameters in the order their gradients were ready (iteration 0)
    logged_sizes: list[int] | None  # _get_ddp_logging_data()["bucket_sizes"], after the run
    logged_rebuilt_sizes: list[int] | None  # ... ["rebuilt_bucket_sizes"]
    max_diff_hook: float  # largest |hooked DDP - plain DDP| gradient, all ranks and iterations
    max_diff_naive: float  # largest |naive - plain DDP|
    grads: np.ndarray  # (world_size, n): hooked DDP's gradient of the last iteration

    @property
    def param_bytes(self) -> list[int]:
        return [4 * n for n in self.param_numels]  # float32

    @property
    def buckets_per_iteration(self) -> list[int]:
        return [len(layout) for layout in self.layouts]

    @property
    def naive_calls_per_iteration(self) -> list[int]:
        return [len(calls) for calls in self.naive_calls]

    def params(self, iteration: int) -> list[list[str]]:
        """The parameter names of each bucket launched on ``iteration``."""
        return [b["params"] for b in self.layouts[iteration]]

    def json_fields(self) -> dict:
        first, cap = bucket_limits(self.bucket_cap_mb)
        keys = ("index", "params", "numel", "bytes")
        return {
            "layers": list(self.layers), "world_size": self.world_size,
            "bucket_cap_mb": self.bucket_cap_mb, "first_bucket_bytes_cap": first,
            "bucket_bytes_cap": cap, "find_unused_parameters": self.find_unused_parameters,
            "static_graph": self.static_graph,
            "gradient_as_bucket_view": self.gradient_as_bucket_view,
            "params": [{"name": n, "numel": k, "bytes": b} for n, k, b in
                       zip(self.param_names, self.param_numels, self.param_bytes)],
            "gradient_ready_order": self.ready_order,
            "iterations": [{"iteration": i, "buckets": [{k: b[k] for k in keys} for b in layout],
                            "naive_all_reduce_calls": len(self.naive_calls[i])}
                           for i, layout in enumerate(self.layouts)],
            "logged_bucket_sizes": self.logged_sizes,
            "logged_rebuilt_bucket_sizes": self.logged_rebuilt_sizes,
            "max_abs_diff_hook_vs_ddp": self.max_diff_hook,
            "max_abs_diff_naive_vs_ddp": self.max_diff_naive}

    def describe(self) -> str:
        first, cap = bucket_limits(self.bucket_cap_mb)
        lines = [f"MLP {','.join(map(str, self.layers))}: {len(self.param_names)} parameters, "
                 f"{sum(self.param_bytes):,} bytes, world size {self.world_size}",
                 f"bucket limits: first {first:,} bytes, then {cap:,} bytes"]
        for i, layout in enumerate(self.layouts):
            lines.append(f"iteration {i}: {len(layout)} bucket(s); naive: "
                         f"{len(self.naive_calls[i])} all-reduce calls")
            lines += [f"  bucket {b['index']}: {b['bytes']:>9,} B  {' '.join(b['params'])}"
                      for b in layout]
        lines.append(f"largest |hooked DDP - DDP without hook| gradient: {self.max_diff_hook:.1e}")
        return "\n".join(lines)

    def describe_naive(self, iteration: int) -> str:
        """Rank 0's naive all-reduce calls on ``iteration``: parameter, bytes, duration."""
        return "\n".join(f"{c['param']:>8}: {c['bytes']:>9,} B, "
                         f"{1e3 * (c['end'] - c['start']):5.2f} ms"
                         for c in self.naive_calls[iteration])

    def describe_limits(self) -> str:
        """DDP's bucket limits for this run's ``bucket_cap_mb``, and its buckets per iteration."""
        first, cap = bucket_limits(self.bucket_cap_mb)
        return f"first limit {first:>11,} B, then {cap:>11,} B: {self.buckets_per_iteration}"


def run(layers=DEFAULT_LAYERS, bucket_cap_mb: float | None = None, iterations: int = 3,
        world_size: int = 2, find_unused_parameters: bool = False, static_graph: bool = False,
        gradient_as_bucket_view: bool = False, batch_size: int = 32, seed: int = 0,
        timeout: float = 60.0) -> Buckets:
    """Record DDP's buckets on ``iterations`` iterations of an MLP of ``layers`` widths."""
    layers = check_layers(layers)
    check_cap(bucket_cap_mb)
    for name, value in (("iterations", iterations), ("batch_size", batch_size)):
        positive_int(name, value)
    results = ddplab.run(record, world_size, timeout=timeout, layers=layers,
                         bucket_cap_mb=bucket_cap_mb, iterations=iterations, seed=seed,
                         find_unused_parameters=bool(find_unused_parameters),
                         static_graph=bool(static_graph), batch_size=batch_size,
                         gradient_as_bucket_view=bool(gradient_as_bucket_view))
    structure = [[(b["iteration"], b["index"], b["params"]) for b in r["buckets"]]
                 for r in results]
    if any(s != structure[0] for s in structure):  # DDP syncs the layout from rank 0
        raise AssertionError("ranks launched different buckets")
    model = make_model(layers, seed)
    first = results[0]
    return Buckets.from_ranks(
        results,
        layers=layers, world_size=len(results), bucket_cap_mb=bucket_cap_mb,
        find_unused_parameters=bool(find_unused_parameters), static_graph=bool(static_graph),
        gradient_as_bucket_view=bool(gradient_as_bucket_view),
        param_names=[n for n, _ in model.named_parameters()],
        param_numels=[p.numel() for p in model.parameters()],
        layouts=[[b for b in first["buckets"] if b["iteration"] == i] for i in range(iterations)],
        naive_calls=[[c for c in first["naive_calls"] if c["iteration"] == i]
                     for i in range(iterations)],
        ready_order=first["ready_order"][0], logged_sizes=first["logged_sizes"],
        logged_rebuilt_sizes=first["logged_rebuilt_sizes"],
        max_diff_hook=max(r["diff"]["hook"] for r in results),
        max_diff_naive=max(r["diff"]["naive"] for r in results),
        grads=np.stack([r["grad"] for r in results]))


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--layers", default="64,1024,1024,10",
                        help="widths of the MLP's Linear layers (default 64,1024,1024,10)")
    parser.add_argument("--bucket-cap-mb", type=float, default=None,
                        help="DDP's bucket_cap_mb in MiB (default: DDP's own, 25 and a 1 MiB "
                             "first bucket)")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--find-unused-parameters", action="store_true")
    parser.add_argument("--static-graph", action="store_true")
    parser.add_argument("--gradient-as-bucket-view", action="store_true")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank")
    parser.add_argument("--seed", type=int, default=0)
