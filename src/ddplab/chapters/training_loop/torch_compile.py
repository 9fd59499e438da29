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

``outside=True`` compiles the wrapper instead, ``torch.compile(DDP(model))``. Dynamo then
breaks the graph inside DDP's own forward (``TORCH_LOGS=graph_breaks``, read once by hand: at
``self.logger.set_runtime_stats_and_log()`` in ``_pre_forward`` and at the
``_inside_ddp_forward`` context manager; the count is in ``torch._dynamo.utils.counters``),
runs the rest of it eagerly, and starts a new frame at the model's forward, which it traces only
if that forward is not in torch's own files: ``trace_rules.check`` skips
``torch.nn.Sequential.forward`` (``torch/_dynamo/trace_rules.py``; compiling a torch.nn module
directly is the exception, ``OptimizedModule._initialize`` wraps it, ``eval_frame.py``). So
``model_kind="sequential"``, a bare ``nn.Sequential``, gets no graph compiled at all, and
``model_kind="module"``, the same layers in a class of one's own (``Stack``), gets DDPOptimizer's
split as ``DDP(torch.compile(model))`` does. DDP's own buckets are read after the first
backward from the comm hook.

``in_place=True`` is the form PyTorch's docs give, ``model.compile()`` and then ``DDP(model)``:
the module compiles its own call in place (``nn.Module.compile``), DDP's forward runs it, and
dynamo splits it at the buckets as for ``DDP(torch.compile(model))``; the model stays itself,
so its keys carry no prefix.

``torch.compile(model)`` returns an ``OptimizedModule`` that holds the model as ``_orig_mod``:
its state-dict keys, and DDP's ``ddp.module.state_dict()`` around it, start with
``_orig_mod.`` (``saved_key``), which a plain model's ``load_state_dict`` refuses.
"""

from __future__ import annotations

import dataclasses
import textwrap

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.chapters.training_loop.checkpointing import first_line
from ddplab.common.checks import a_bool, int_in_range, one_of, positive_number
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.results import Result

LAYERS = (64, 512, 512, 512, 10)  # 128 KB, 1 MB, 1 MB, 20 KB of float32 weights
MODEL_KINDS = ("sequential", "module")


class Stack(torch.nn.Module):
    """The same layers in a model class of one's own: its forward is the reader's code, which
    dynamo traces as a frame of its own (``nn.Sequential.forward`` is torch's, which it
    skips)."""

    def __init__(self, layers, seed):
        super().__init__()
        self.layers = make_model(layers, seed)

    def forward(self, x):
        return self.layers(x)


def build_model(model_kind: str, seed: int) -> torch.nn.Module:
    return make_model(LAYERS, seed) if model_kind == "sequential" else Stack(LAYERS, seed)


# ---------------------------------------------------------------- on every rank


def compiled_step(ctx, bucket_cap_mb: float, optimize_ddp: bool, outside: bool,
                  seed: int, model_kind: str = "sequential", in_place: bool = False) -> dict:
    """Two steps of DDP around the compiled model; count the graphs the backend is given and
    the buckets DDP all-reduces in the second backward (after DDP rebuilt its buckets)."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    graphs, buckets = [], []

    def counting_backend(gm, example_inputs):
        graphs.append(len(gm.graph.nodes))
        return gm.forward

    def counting_hook(state, bucket):
        buckets.append(bucket.buffer().numel() * 4)
        return allreduce_hook(state, bucket)

    torch._dynamo.reset()
    counters.clear()
    model = build_model(model_kind, seed).to(ctx.device)
    with torch._dynamo.config.patch(optimize_ddp=optimize_ddp):
        # compile the module inside DDP: dynamo sees the active DDP module while DDP's forward
        # runs it (DistributedDataParallel._get_active_ddp_module, convert_frame.py)
        if outside:  # torch.compile(DDP(model)) instead
            ddp = DDP(model, bucket_cap_mb=bucket_cap_mb)
            step_model = torch.compile(ddp, backend=counting_backend)
        elif in_place:  # model.compile(), then DDP(model): the model compiles its own call
            model.compile(backend=counting_backend)
            ddp = step_model = DDP(model, bucket_cap_mb=bucket_cap_mb)
        else:
            ddp = DDP(torch.compile(model, backend=counting_backend), bucket_cap_mb=bucket_cap_mb)
            step_model = ddp
        ddp.register_comm_hook(None, counting_hook)
        rows = slice(ctx.rank * 4, (ctx.rank + 1) * 4)
        for step in range(2):
            buckets.clear()
            model.zero_grad()
            X, y = make_batch(LAYERS, 4, ctx.world_size, seed, step)
            F.mse_loss(step_model(X[rows].to(ctx.device)), y[rows].to(ctx.device)).backward()
    graph_breaks = sum(counters["graph_break"].values())
    torch._dynamo.reset()
    return {"graphs": len(graphs), "graph_nodes": graphs, "bucket_bytes": list(buckets),
            "graph_breaks": graph_breaks, "saved_key": next(iter(ddp.module.state_dict())),
            "grad": torch.cat([p.grad.flatten() for p in model.parameters()]).cpu().numpy()}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class Compile(Result):
    world_size: int
    bucket_cap_mb: float
    optimize_ddp: bool
    outside: bool  # torch.compile(DDP(model)) rather than DDP(torch.compile(model))
    model_kind: str  # "sequential" (a bare nn.Sequential) or "module" (a class of one's own)
    graphs: int  # graphs the backend compiled
    graph_breaks: int  # dynamo's count of graph breaks, over both steps
    saved_key: str  # the first key of ddp.module.state_dict()
    buckets: int  # buckets DDP all-reduced in the second backward
    bucket_bytes: list[int]
    max_diff_vs_one_process: float  # the second step's gradient
    in_place: bool = False  # model.compile(), then DDP(model)

    def describe(self) -> str:
        wrap = ("compile(DDP(m))" if self.outside else
                "m.compile(); DDP(m)" if self.in_place else "DDP(compile(m))")
        kind = "nn.Sequential" if self.model_kind == "sequential" else "own nn.Module"
        buckets = textwrap.fill(
            f"DDP's buckets (MiB): {[round(b / 2**20, 2) for b in self.bucket_bytes]}", 78,
            initial_indent="  ", subsequent_indent="    ")
        return (f"{wrap}, m: {kind}, bucket_cap_mb {self.bucket_cap_mb:g}, "
                f"optimize_ddp={self.optimize_ddp}:\n"
                f"  {self.graphs} graph(s) compiled, {self.graph_breaks} graph break(s); "
                f"gradient off one process's by {self.max_diff_vs_one_process:.1e}\n"
                f"  ddp.module.state_dict() keys like {self.saved_key!r}\n{buckets}")


def run(world_size: int = 2, bucket_cap_mb: float = 1.0, optimize_ddp: bool = True,
        outside: bool = False, seed: int = 0, timeout: float = 120.0,
        model_kind: str = "sequential", in_place: bool = False) -> Compile:
    """Compile DDP's module with a counting backend; compare graphs with buckets."""
    int_in_range("world_size", world_size, 1, 64)
    positive_number("bucket_cap_mb", bucket_cap_mb)
    if bucket_cap_mb < 1.0:  # DDPOptimizer.__init__ asserts first bucket (1 MiB) <= the cap
        raise ValueError(f"bucket_cap_mb must be at least 1 (DDPOptimizer's first bucket is "
                         f"1 MiB and may not exceed the cap), got {bucket_cap_mb!r}")
    a_bool("optimize_ddp", optimize_ddp)
    a_bool("outside", outside)
    a_bool("in_place", in_place)
    if outside and in_place:
        raise ValueError("outside (torch.compile(DDP(model))) and in_place (model.compile(), "
                         "then DDP(model)) are two forms: choose one")
    one_of("model_kind", model_kind, MODEL_KINDS)
    results = ddplab.run(compiled_step, world_size, timeout=timeout,
                         bucket_cap_mb=float(bucket_cap_mb), optimize_ddp=optimize_ddp,
                         outside=outside, seed=seed, model_kind=model_kind, in_place=in_place)
    model = build_model(model_kind, seed)
    X, y = make_batch(LAYERS, 4, world_size, seed, 1)
    F.mse_loss(model(X), y).backward()
    reference = torch.cat([p.grad.flatten() for p in model.parameters()]).numpy()
    return Compile.from_ranks(
        results,
        world_size=world_size, bucket_cap_mb=float(bucket_cap_mb), optimize_ddp=optimize_ddp,
        outside=outside, model_kind=model_kind, graphs=results[0]["graphs"],
        graph_breaks=results[0]["graph_breaks"], saved_key=results[0]["saved_key"],
        buckets=len(results[0]["bucket_bytes"]),
        bucket_bytes=results[0]["bucket_bytes"],
        max_diff_vs_one_process=float(max(abs(r["grad"] - reference).max() for r in results)),
        in_place=in_place,
    )


def small_cap_error(world_size: int = 2, bucket_cap_mb: float = 0.5, seed: int = 0,
                    timeout: float = 120.0) -> str:
    """What torch says to a cap below DDPOptimizer's 1 MiB first piece (``run`` refuses such a
    cap with a ValueError first): the rank's own AssertionError, raised at the first forward,
    when dynamo builds ``DDPOptimizer(bucket_bytes_cap=ddp.bucket_bytes_cap)``
    (``convert_frame.py``) and ``DDPOptimizer.__init__`` finds its first piece larger than the
    cap (``torch/_dynamo/backends/distributed.py``, torch 2.13)."""
    int_in_range("world_size", world_size, 1, 64)
    positive_number("bucket_cap_mb", bucket_cap_mb)
    if bucket_cap_mb >= 1.0:
        raise ValueError(f"bucket_cap_mb must be below 1 (DDPOptimizer's first piece) to "
                         f"raise, got {bucket_cap_mb!r}")
    try:
        ddplab.run(compiled_step, world_size, timeout=timeout, bucket_cap_mb=float(bucket_cap_mb),
                   optimize_ddp=True, outside=False, seed=seed)
    except ddplab.RankError as exc:
        return first_line(exc)
    raise AssertionError(f"a {bucket_cap_mb} MiB cap compiled without an error")
