"""Mixed precision, counted: what a rank keeps when it trains with ``torch.autocast``, and with
FSDP2's ``MixedPrecisionPolicy``.

    python -m ddplab precision --world-size 2 --strategy zero1 [--bucket-view] [--json]
    python -m ddplab precision --world-size 2 --scheme fsdp_policy --strategy fsdp

Every rank builds the memory chapter's model (``memory.widths``: equal ``Linear`` layers), trains
it ``steps`` steps with Adam, and after the last step counts what it holds by category, each
storage once (``accounting.held_bytes``), with the dtypes it found in each. Under

* ``autocast``: the forward runs inside ``torch.autocast(device_type, dtype=torch.bfloat16)``
  (bf16 on CPU and on GPU alike) around DDP, ZeRO-1 or FSDP, as the training-loop chapter
  teaches; the loss is computed in fp32 outside it;
* ``fsdp_policy``: ``fully_shard(..., mp_policy=MixedPrecisionPolicy(param_dtype=
  torch.bfloat16))`` on every layer and on the model, no autocast.

A forward pre-hook on the first layer, run after FSDP's own (which is registered with
``prepend=True``, ``_fsdp_state.py``), records the dtype and bytes of the parameters that layer
computes with: under FSDP, the all-gathered, unsharded ones, present only while it runs. The
process's ``malloc`` count (``malloc_count``) checks that nothing else stays allocated: no bf16
copy kept between steps.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

import ddplab
from ddplab.chapters.memory import accounting, calculator, malloc_count, memory
from ddplab.chapters.memory.memory import widths
from ddplab.chapters.memory.strategies import STRATEGIES, Trained, linear_layers, shard_with_fsdp
from ddplab.common.checks import one_of
from ddplab.common.ledger import local
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.results import Result
from ddplab.engine.placement import require

COMMAND = "precision"  # python -m ddplab precision
SCHEMES = ("autocast", "fsdp_policy")  # the calculator's schemes that are run here
BATCH_SIZE = 4


class PolicySharded:
    """FSDP2 with ``MixedPrecisionPolicy(param_dtype=torch.bfloat16)`` on every layer and on
    the model, and Adam on the sharded (fp32) parameters: ``Trained``'s attributes."""

    def __init__(self, model, world_size, device):
        from torch.distributed.fsdp import MixedPrecisionPolicy

        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
        self.model = model
        self.module = shard_with_fsdp(model, linear_layers(model), device.type,
                                      mp_policy=policy)
        self.optimizer = self.local_optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def bucket_buffers(self) -> list:
        return []


def dtypes(tensors) -> list[str]:
    return sorted({str(local(t).dtype).replace("torch.", "") for t in tensors if t is not None})


# ---------------------------------------------------------------- on every rank


def train(ctx, strategy: str, scheme: str, params_millions: float, bucket_view: bool,
          steps: int, seed: int) -> dict:
    """Train with ``scheme``; count what this rank holds after the last step."""
    layers = widths(params_millions)
    computed = {}
    (model, trained, output), allocated = malloc_count.held_after(
        _build_and_train, ctx, strategy, scheme, layers, bucket_view, steps, seed, computed)
    state = [t for t in accounting.optimizer_tensors(trained.local_optimizer) if t.dim() > 0]
    return {"held": accounting.held_bytes(model, trained.local_optimizer,
                                          trained.bucket_buffers()),
            "allocated": allocated, "tensors": sum(1 for _ in model.parameters()),
            "dtypes": {"parameters": dtypes(model.parameters()),
                       "gradients": dtypes(p.grad for p in model.parameters()),
                       "buckets": dtypes(trained.bucket_buffers()),
                       "optimizer_state": dtypes(state)},
            "output_dtype": str(output.dtype).replace("torch.", ""),
            "first_layer_computes_with": computed}


def _build_and_train(ctx, strategy, scheme, layers, bucket_view, steps, seed, computed):
    model = make_model(layers, seed=seed, init="he").to(ctx.device)
    if scheme == "fsdp_policy":
        trained = PolicySharded(model, ctx.world_size, ctx.device)
    else:
        trained = Trained(strategy, model, "adam", bucket_view, ctx.world_size, ctx.device)

    def record(layer, _inputs):  # the parameters this layer computes with, as registered now
        computed.update(dtypes=dtypes(layer.parameters()),
                        bytes=sum(local(p).untyped_storage().nbytes() for p in
                                  layer.parameters()))

    first = next(m for m in model if isinstance(m, torch.nn.Linear))
    handle = first.register_forward_pre_hook(record)
    for step in range(steps):
        X, y = make_batch(layers, BATCH_SIZE, ctx.world_size, seed, step)
        rows = slice(ctx.rank * BATCH_SIZE, (ctx.rank + 1) * BATCH_SIZE)
        trained.optimizer.zero_grad(set_to_none=False)
        with torch.autocast(ctx.device.type, dtype=torch.bfloat16,
                            enabled=scheme == "autocast"):
            output = trained.module(X[rows].to(ctx.device))
        F.mse_loss(output.float(), y[rows].to(ctx.device)).backward()
        trained.optimizer.step()
    handle.remove()
    return model, trained, output.detach()


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class Precision(Result):
    """Bytes and dtypes each rank holds after ``steps`` Adam steps under one scheme."""

    world_size: int
    strategy: str
    scheme: str
    bucket_view: bool
    parameter_count: int
    parameter_tensors: int
    bytes_per_rank: list[dict]
    measured_bytes_per_rank: list  # malloc's bytes in use for the run, per rank (None: no glibc)
    dtypes: dict  # category -> dtypes found in it (rank 0)
    output_dtype: str  # the model's output, rank 0
    first_layer_computes_with: dict  # dtypes and bytes of its parameters during its forward
    json_extras = ("predicted_per_rank",)

    @property
    def predicted_per_rank(self) -> dict[str, float]:
        """The calculator's bytes by category for this run, under its scheme."""
        return calculator.bytes_per_rank(
            self.parameter_count, "adam", self.strategy, self.world_size, self.scheme,
            bucket_view=self.bucket_view, tensors=self.parameter_tensors)

    def matches_calculator(self) -> bool:
        predicted = self.predicted_per_rank
        return all({k: predicted[k] for k in held} == held for held in self.bytes_per_rank)

    def measured_over_counted(self) -> list:
        """malloc's bytes over the tensors' bytes, per rank (None without glibc 2.33+): near 1
        when nothing but the counted tensors stays allocated (no hidden bf16 copy)."""
        return [None if m is None else m / sum(c.values())
                for m, c in zip(self.measured_bytes_per_rank, self.bytes_per_rank)]

    def bytes_per_parameter(self) -> float:
        """Rank 0's bytes over the parameter count (Adam's step counters included)."""
        return sum(self.bytes_per_rank[0].values()) / self.parameter_count

    def describe(self) -> str:
        view = ", bucket view" if self.bucket_view else ""
        head = (f"{self.strategy}{view}, Adam, {calculator.PRECISION_NAMES[self.scheme]}, "
                f"world size {self.world_size}: {self.parameter_count:,} parameters")
        rows = [f"  {category:<16}{nbytes / self.parameter_count:6.2f} bytes/parameter  "
                f"{', '.join(self.dtypes[category]) or '-'}"
                for category, nbytes in self.bytes_per_rank[0].items()]
        layer = self.first_layer_computes_with
        return "\n".join([
            head, *rows, f"  total{self.bytes_per_parameter():17.2f} bytes/parameter on rank 0; "
            f"the model's output: {self.output_dtype}",
            f"the first layer computes with {', '.join(layer['dtypes'])} parameters, "
            f"{layer['bytes'] / 1e6:.2f} MB while it runs"])


def run(world_size: int = 2, strategy: str = "ddp", scheme: str = "autocast",
        params_millions: float = 2.0, bucket_view: bool = False, steps: int = 2, seed: int = 0,
        timeout: float = 120.0) -> Precision:
    """Train under ``scheme`` on ``world_size`` ranks and count each rank's bytes."""
    one_of("scheme", scheme, SCHEMES)
    if calculator.ONLY_WITH[scheme] not in ("", strategy):
        raise ValueError(f"scheme {scheme!r} is FSDP2's MixedPrecisionPolicy: strategy "
                         f"{calculator.ONLY_WITH[scheme]!r} only, got {strategy!r}")
    memory._check(world_size, strategy, "adam", params_millions, bucket_view, steps)  # its checks
    require(strategy, ddplab.placement())  # what does not run there, refused
    results = ddplab.run(train, world_size, strategy=strategy, scheme=scheme,
                         params_millions=params_millions, bucket_view=bucket_view, steps=steps,
                         seed=seed, timeout=timeout)
    layers = widths(params_millions)
    return Precision.from_ranks(
        results,
        world_size=len(results), strategy=strategy, scheme=scheme, bucket_view=bucket_view,
        parameter_count=sum(a * b + b for a, b in zip(layers[:-1], layers[1:])),
        parameter_tensors=results[0]["tensors"],
        bytes_per_rank=[r["held"] for r in results],
        measured_bytes_per_rank=[r["allocated"] for r in results], dtypes=results[0]["dtypes"],
        output_dtype=results[0]["output_dtype"],
        first_layer_computes_with=results[0]["first_layer_computes_with"])


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--strategy", default="ddp",
                        help=f"one of {', '.join(STRATEGIES)} (default ddp)")
    parser.add_argument("--scheme", default="autocast",
                        help=f"one of {', '.join(SCHEMES)} (default autocast)")
    parser.add_argument("--params-millions", type=float, default=2.0)
    parser.add_argument("--bucket-view", action="store_true",
                        help="DDP's gradient_as_bucket_view=True")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
