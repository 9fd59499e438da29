"""What does each rank hold, and what do ZeRO-1 and FSDP take off it?

    python -m ddplab memory --world-size 2 --strategy zero1 --optimizer adam \
        --params-millions 8 [--bucket-view] [--steps 2] [--json]
    torchrun --nproc-per-node 2 -m ddplab memory --strategy fsdp --params-millions 8 --json

Every rank builds the same model of ``LAYERS`` equal ``Linear(width, width)`` layers (so
ZeRO-1's and FSDP's shares are even), trains it ``steps`` steps with one strategy on its own
slice of each global batch, and after the last optimizer step counts the bytes it holds by
category, each distinct storage once (``accounting``). A second count, by the allocator the
rank's tensors come from (``allocator_count``: the bytes the process's ``malloc`` holds for the
run on a CPU rank, the CUDA caching allocator's on a GPU rank, with its peaks), measures the
same run from the other side. The driver also runs DDP on the same data and reports how far
this strategy's parameters end up from DDP's.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

import ddplab
from ddplab.chapters.memory import accounting, allocator_count, calculator
from ddplab.chapters.memory.strategies import OPTIMIZERS, STRATEGIES, Trained
from ddplab.common.checks import a_bool, one_of, positive_int, positive_number
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.results import Result
from ddplab.engine.placement import require

COMMAND = "memory"  # python -m ddplab memory

LAYERS = 24  # divides by 1, 2, 3, 4, 6 and 8: ZeRO-1's shares are even at these world sizes
WIDTH_STEP = 24  # widths are multiples of this: FSDP's row shards are even too
MAX_PARAMS_MILLIONS = 200
BATCH_SIZE = 4  # samples per rank


def width_for(params_millions: float) -> int:
    """The smallest width, a multiple of ``WIDTH_STEP``, with at least this many parameters."""
    need = math.sqrt(params_millions * 1e6 / LAYERS)
    return max(WIDTH_STEP, WIDTH_STEP * math.ceil(need / WIDTH_STEP))


def widths(params_millions: float) -> tuple[int, ...]:
    return (width_for(params_millions),) * (LAYERS + 1)


# ---------------------------------------------------------------- on every rank


def train(ctx, strategy: str, optimizer: str, params_millions: float, bucket_view: bool,
          steps: int, seed: int, return_parameters: bool, batch_size: int = BATCH_SIZE) -> dict:
    """Train, count what this rank holds, and (rank 0, if asked) return the parameters."""
    layers = widths(params_millions)

    def build_and_train(watch):
        model = make_model(layers, seed=seed, init="he").to(ctx.device)
        trained = Trained(strategy, model, optimizer, bucket_view, ctx.world_size, ctx.device)
        watch.attach(trained.local_optimizer)
        for step in range(steps):
            X, y = make_batch(layers, batch_size, ctx.world_size, seed, step)
            rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
            trained.step(X[rows].to(ctx.device), y[rows].to(ctx.device))
        return trained

    trained, counted = allocator_count.held_after(build_and_train, ctx.device)
    held = accounting.held_bytes(trained.model, trained.local_optimizer,
                                 trained.bucket_buffers())
    tensors = sum(1 for p in trained.model.parameters())
    flat = trained.full_parameters()  # a collective under FSDP: every rank calls it
    return {"held": held, "counted": dataclasses.asdict(counted), "tensors": tensors,
            "activations": trained.activation_bytes,
            "parameters": flat.cpu().numpy() if return_parameters and ctx.rank == 0 else None}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class Memory(Result):
    """Bytes each rank holds after ``steps`` optimizer steps of one strategy."""

    world_size: int
    strategy: str
    optimizer: str
    bucket_view: bool
    steps: int
    batch_size: int
    width: int
    parameter_count: int
    parameter_tensors: int
    bytes_per_rank: list[dict]  # one per rank: bytes by accounting.CATEGORIES
    allocator: str  # what measured_bytes_per_rank counts: "malloc" (CPU ranks) or "cuda"
    measured_bytes_per_rank: list[int]  # the allocator's bytes in use for the run, per rank
    peak_bytes_per_rank: list  # cuda: most bytes allocated during the run; malloc: None
    step_peak_bytes_per_rank: list  # cuda: last optimizer.step()'s most above its start
    max_param_diff_vs_ddp: float
    activation_bytes_per_rank: list[int]  # saved for backward in the last step (gone now)
    torch_version: str
    json_extras = ("total_per_rank", "predicted_per_rank")

    @property
    def total_per_rank(self) -> list[int]:
        return [sum(held.values()) for held in self.bytes_per_rank]

    @property
    def predicted_per_rank(self) -> dict[str, float]:
        """The calculator's bytes by category for this run (fp32, no activations)."""
        return calculator.bytes_per_rank(
            self.parameter_count, self.optimizer, self.strategy, self.world_size,
            bucket_view=self.bucket_view, tensors=self.parameter_tensors)

    def measured_over_counted(self) -> list[float]:
        """The allocator's bytes over the tensors' bytes, per rank (None without glibc 2.33+;
        on CUDA the count leaves out Adam's ``step`` counters, which stay on the host)."""
        return [None if m is None else m / c
                for m, c in zip(self.measured_bytes_per_rank, self.total_per_rank)]

    def describe(self) -> str:
        view = ", bucket view" if self.bucket_view else ""
        lines = [f"{self.strategy}{view}, {self.optimizer}, world size {self.world_size}: "
                 f"{self.parameter_count:,} parameters",
                 f"{f'MB after step {self.steps}':<17}" + "".join(f"{h:>10}" for h in (
                     "params", "grads", "buckets", "optimizer", "total", self.allocator))]
        for rank, held in enumerate(self.bytes_per_rank):
            counted = [held[k] for k in accounting.CATEGORIES] + [sum(held.values())]
            measured = self.measured_bytes_per_rank[rank]
            lines.append(f"rank {rank:<12}" + "".join(f"{b / 1e6:10.1f}" for b in counted)
                         + (f"{'n/a':>10}" if measured is None else f"{measured / 1e6:10.1f}"))
        lines.append(f"activations saved for backward, {self.batch_size} samples per rank: "
                     f"{self.activation_bytes_per_rank[0] / 1e6:.2f} MB (freed by the step)")
        if self.step_peak_bytes_per_rank[0] is not None:
            lines.append(f"CUDA allocator, rank 0: peak {self.peak_bytes_per_rank[0] / 1e6:.1f} "
                         f"MB during the run; the last optimizer step allocated "
                         f"{self.step_peak_bytes_per_rank[0] / 1e6:.1f} MB more at its peak")
        lines.append(f"largest |parameter - DDP's| after the steps: "
                     f"{self.max_param_diff_vs_ddp:.1e}")
        return "\n".join(lines)


def run(world_size: int = 2, strategy: str = "ddp", optimizer: str = "adam",
        params_millions: float = 8.0, bucket_view: bool = False, steps: int = 2,
        batch_size: int = BATCH_SIZE, seed: int = 0, timeout: float = 120.0) -> Memory:
    """Train with ``strategy`` on ``world_size`` ranks, count each rank's bytes, and compare
    the parameters with DDP's on the same data."""
    _check(world_size, strategy, optimizer, params_millions, bucket_view, steps)
    positive_int("batch_size", batch_size)
    require(strategy, ddplab.placement())  # what does not run there, refused
    common = dict(optimizer=optimizer, params_millions=params_millions, steps=steps,
                  batch_size=batch_size, seed=seed, timeout=timeout)
    results = ddplab.run(train, world_size, strategy=strategy, bucket_view=bucket_view,
                         return_parameters=strategy != "ddp", **common)
    diff = 0.0
    if strategy != "ddp":
        reference = ddplab.run(train, world_size, strategy="ddp", bucket_view=False,
                               return_parameters=True, **common)[0]["parameters"]
        diff = float(np.abs(results[0]["parameters"] - reference).max())
    layers = widths(params_millions)
    return Memory.from_ranks(
        results,
        world_size=len(results), strategy=strategy, optimizer=optimizer,
        bucket_view=bucket_view, steps=steps, batch_size=batch_size, width=layers[0],
        parameter_count=sum(p.numel() for p in _shapes(layers)),
        parameter_tensors=results[0]["tensors"],
        bytes_per_rank=[r["held"] for r in results],
        allocator=results[0]["counted"]["allocator"],
        measured_bytes_per_rank=[r["counted"]["allocated"] for r in results],
        peak_bytes_per_rank=[r["counted"]["peak"] for r in results],
        step_peak_bytes_per_rank=[r["counted"]["step_peak"] for r in results],
        max_param_diff_vs_ddp=diff,
        activation_bytes_per_rank=[r["activations"] for r in results],
        torch_version=torch.__version__)


def _shapes(layers):
    return [torch.empty(n_out, n_in, device="meta") for n_in, n_out in
            zip(layers[:-1], layers[1:])] + [torch.empty(n, device="meta") for n in layers[1:]]


def _check(world_size, strategy, optimizer, params_millions, bucket_view, steps) -> None:
    positive_int("world_size", world_size)
    one_of("strategy", strategy, STRATEGIES)
    one_of("optimizer", optimizer, OPTIMIZERS)
    positive_number("params_millions", params_millions)
    if params_millions > MAX_PARAMS_MILLIONS:
        raise ValueError(f"params_millions must be at most {MAX_PARAMS_MILLIONS} (every rank "
                         f"holds the model on this machine), got {params_millions!r}")
    a_bool("bucket_view", bucket_view)
    positive_int("steps", steps)


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--strategy", default="ddp",
                        help=f"one of {', '.join(STRATEGIES)} (default ddp)")
    parser.add_argument("--optimizer", default="adam",
                        help=f"one of {', '.join(OPTIMIZERS)} (default adam)")
    parser.add_argument("--params-millions", type=float, default=8.0,
                        help="model size in millions of parameters (default 8)")
    parser.add_argument("--bucket-view", action="store_true",
                        help="DDP's gradient_as_bucket_view=True")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="samples per rank")
    parser.add_argument("--seed", type=int, default=0)
