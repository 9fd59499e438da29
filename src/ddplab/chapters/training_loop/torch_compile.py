"""``torch.compile`` on a DDP model: DDPOptimizer splits the compiled graph at bucket
boundaries, so that each bucket's all-reduce can still start while backward runs.

A compiled graph runs its whole backward as one autograd node: every gradient would be ready
at once, at the end, and DDP's hooks could not overlap communication with computation. So
when dynamo compiles a module wrapped in DDP (``torch._dynamo.config.optimize_ddp``, True by
default in torch 2.13, ``torch/_dynamo/config.py``), it hands the traced graph to
``DDPOptimizer.compile_fn`` (``torch/_dynamo/backends/distributed.py``), which counts parameter
bytes backwards through the graph, starts a new subgraph whenever ``ddp.bucket_bytes_cap`` is
reached, and calls the backend once per subgraph.

Here the backend is a function that counts its calls and returns the graph's own
``forward`` (no code generation, so compiling takes a fraction of a second on CPU). The split
is made before the backend is called; the count is the number of subgraphs. Checked once
by hand (torch 2.13, one gloo rank, this model, 1 MiB buckets): wrapping ``aot_eager`` and
``inductor`` in the same counter gives the same 3 graphs, compiled in 1.4 s and 18 s on this
machine's CPU; neither runs here.

``outside=True`` compiles the wrapper instead, ``torch.compile(DDP(model))``. In torch 2.13 on
CPU the backend is then given no graph at all: dynamo's log (``TORCH_LOGS=graph_breaks,dynamo``,
read once by hand) shows a graph break at ``self.logger.set_runtime_stats_and_log()`` in
DDP's ``_pre_forward`` and a context manager it does not trace (``_inside_ddp_forward``),
after which the model's forward runs uncompiled. DDP's own buckets are
read after the first backward from ``ddp._get_ddp_logging_data()`` ("bucket_sizes").
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.checks import a_bool, int_in_range, positive_number
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.results import Result

LAYERS = (64, 512, 512, 512, 10)  # 128 KB, 1 MB, 1 MB, 20 KB of float32 weights


# ---------------------------------------------------------------- on every rank


def compiled_step(ctx, bucket_cap_mb: float, optimize_ddp: bool, outside: bool,
                  seed: int) -> dict:
    """Two steps of DDP around the compiled model; count the graphs the backend is given and
    the buckets DDP all-reduces in the second backward (after DDP rebuilt its buckets)."""
    import torch._dynamo
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    graphs, buckets = [], []

    def counting_backend(gm, example_inputs):
        graphs.append(len(gm.graph.nodes))
        return gm.forward

    def counting_hook(state, bucket):
        buckets.append(bucket.buffer().numel() * 4)
        return allreduce_hook(state, bucket)

    torch._dynamo.reset()
    model = make_model(LAYERS, seed)
    with torch._dynamo.config.patch(optimize_ddp=optimize_ddp):
        # compile the module inside DDP: dynamo sees the active DDP module while DDP's forward
        # runs it (DistributedDataParallel._get_active_ddp_module, convert_frame.py)
        if outside:  # torch.compile(DDP(model)) instead
            ddp = DDP(model, bucket_cap_mb=bucket_cap_mb)
            step_model = torch.compile(ddp, backend=counting_backend)
        else:
            ddp = DDP(torch.compile(model, backend=counting_backend), bucket_cap_mb=bucket_cap_mb)
            step_model = ddp
        ddp.register_comm_hook(None, counting_hook)
        rows = slice(ctx.rank * 4, (ctx.rank + 1) * 4)
        for step in range(2):
            buckets.clear()
            model.zero_grad()
            X, y = make_batch(LAYERS, 4, ctx.world_size, seed, step)
            F.mse_loss(step_model(X[rows]), y[rows]).backward()
    torch._dynamo.reset()
    return {"graphs": len(graphs), "graph_nodes": graphs, "bucket_bytes": list(buckets),
            "grad": torch.cat([p.grad.flatten() for p in model.parameters()]).numpy()}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class Compile(Result):
    world_size: int
    bucket_cap_mb: float
    optimize_ddp: bool
    outside: bool  # torch.compile(DDP(model)) rather than DDP(torch.compile(model))
    graphs: int  # graphs the backend compiled
    buckets: int  # buckets DDP all-reduced in the second backward
    bucket_bytes: list[int]
    max_diff_vs_one_process: float  # the second step's gradient

    def describe(self) -> str:
        wrap = "compile(DDP(m))" if self.outside else "DDP(compile(m))"
        return (f"{wrap}, bucket_cap_mb {self.bucket_cap_mb:g}, "
                f"optimize_ddp={self.optimize_ddp}: "
                f"{self.graphs} graph(s) compiled\n  DDP's buckets (MiB): "
                f"{[round(b / 2**20, 2) for b in self.bucket_bytes]}; gradient off one "
                f"process's by {self.max_diff_vs_one_process:.1e}")


def run(world_size: int = 2, bucket_cap_mb: float = 1.0, optimize_ddp: bool = True,
        outside: bool = False, seed: int = 0, backend: str = "auto",
        timeout: float = 120.0) -> Compile:
    """Compile DDP's module with a counting backend; compare graphs with buckets."""
    int_in_range("world_size", world_size, 1, 64)
    positive_number("bucket_cap_mb", bucket_cap_mb)
    if bucket_cap_mb < 1.0:  # DDPOptimizer.__init__ asserts first bucket (1 MiB) <= the cap
        raise ValueError(f"bucket_cap_mb must be at least 1 (DDPOptimizer's first bucket is "
                         f"1 MiB and may not exceed the cap), got {bucket_cap_mb!r}")
    a_bool("optimize_ddp", optimize_ddp)
    a_bool("outside", outside)
    results = ddplab.run(compiled_step, world_size, backend=backend, timeout=timeout,
                         bucket_cap_mb=float(bucket_cap_mb), optimize_ddp=optimize_ddp,
                         outside=outside, seed=seed)
    model = make_model(LAYERS, seed)
    X, y = make_batch(LAYERS, 4, world_size, seed, 1)
    F.mse_loss(model(X), y).backward()
    reference = torch.cat([p.grad.flatten() for p in model.parameters()]).numpy()
    return Compile(
        world_size=world_size, bucket_cap_mb=float(bucket_cap_mb), optimize_ddp=optimize_ddp,
        outside=outside, graphs=results[0]["graphs"], buckets=len(results[0]["bucket_bytes"]),
        bucket_bytes=results[0]["bucket_bytes"],
        max_diff_vs_one_process=float(max(abs(r["grad"] - reference).max() for r in results)),
    ).on(results)
