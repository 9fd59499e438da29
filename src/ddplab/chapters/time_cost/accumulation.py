"""Gradient accumulation with ``no_sync``: one all-reduce per optimizer step instead of k.

    python -m ddplab accumulate --world-size 2 --batch-size 8 --micro-batches 4 --seed 0 --json
    torchrun --nproc-per-node 2 -m ddplab accumulate --batch-size 8 --micro-batches 4 --json

Each rank runs ``k`` micro-batches of ``batch_size`` samples before one optimizer step. Under
``ddp.no_sync()`` DDP launches no all-reduce and autograd adds the gradients up in ``.grad``;
the next backward outside it all-reduces the sum (``DistributedDataParallel.no_sync``). With
every loss divided by ``k``, that is the gradient of one batch of ``batch_size x k x
world_size`` samples: the global batch of the optimizer step. Micro-batch ``m`` of rank ``r``
is rows ``r*B`` to ``(r+1)*B`` of iteration ``m`` of ``mlp.make_batch``.

``accumulate`` is the loop to copy; ``accumulate_with_mistake`` makes one of the two classic
mistakes on purpose, to show what each does.
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.chapters.time_cost.step_time import LAYERS  # the chapter's model
from ddplab.common import clock, hooks, mlp
from ddplab.common.checks import one_of, positive_int
from ddplab.common.results import Result

COMMAND = "accumulate"  # python -m ddplab accumulate

MISTAKES = (None, "loss not divided", "forward outside no_sync")


def accumulate(ddp, batches) -> None:
    """Gradients of ``k = len(batches)`` micro-batches, all-reduced once:
    every loss divided by ``k``, forward *and* backward of all but the last
    inside ``no_sync``."""
    k = len(batches)
    for m, (X, y) in enumerate(batches):
        last = m == k - 1
        with contextlib.nullcontext() if last else ddp.no_sync():
            loss = F.mse_loss(ddp(X), y) / k
            loss.backward()


def accumulate_with_mistake(ddp, batches, mistake: str) -> None:
    """:func:`accumulate` made wrong: ``"loss not divided"`` leaves out the
    ``/ k``; ``"forward outside no_sync"`` enters ``no_sync`` only for
    backward, but DDP decides at the end of *forward* whether the next
    backward all-reduces (``DistributedDataParallel._post_forward`` calls
    ``reducer.prepare_for_backward`` only when ``require_backward_grad_sync``
    is set, torch 2.13 distributed.py), so every micro-batch is all-reduced
    anyway."""
    k = len(batches)
    for m, (X, y) in enumerate(batches):
        skip = contextlib.nullcontext() if m == k - 1 else ddp.no_sync()
        if mistake == "loss not divided":
            with skip:
                F.mse_loss(ddp(X), y).backward()
        else:
            loss = F.mse_loss(ddp(X), y) / k
            with skip:
                loss.backward()


def micro_batches(ctx, layers, batch_size: int, k: int, seed: int, first: int = 0) -> list:
    """This rank's ``k`` micro-batches, iterations ``first`` to ``first + k - 1``."""
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    return [tuple(t[rows].to(ctx.device)
                  for t in mlp.make_batch(layers, batch_size, ctx.world_size, seed, first + m))
            for m in range(k)]


def sync_every_micro_batch(ddp, batches) -> None:
    """The same gradient as :func:`accumulate`, all-reduced after every micro-batch."""
    for X, y in batches:
        (F.mse_loss(ddp(X), y) / len(batches)).backward()


def gradients(ctx, layers, batch_size: int, k: int, seed: int, mistake, warmup: bool) -> dict:
    """One optimizer step's accumulated gradient, and the bucket all-reduces each micro-batch's
    backward launched, with ``no_sync`` (or ``mistake``) and with every micro-batch
    synchronised. ``warmup`` runs one synchronised backward first (its gradient dropped), so
    that DDP has rebuilt its buckets: its first backward all-reduces a single bucket."""
    runs = {}
    for how in ("no_sync", "every micro-batch"):
        model = mlp.make_model(layers, seed).to(ctx.device)
        ddp = DDP(model)  # keep a reference: a DDP freed before backward never all-reduces
        log = hooks.BucketLog(model, ctx.world_size)
        ddp.register_comm_hook(log, hooks.record_and_allreduce)
        # Each forward starts the next micro-batch: its backward's buckets are tagged with it.
        model.register_forward_pre_hook(lambda *_, log=log: setattr(log, "iteration",
                                                                    log.iteration + 1))
        batches = micro_batches(ctx, layers, batch_size, k, seed)
        if warmup:
            log.iteration = -2
            F.mse_loss(ddp(batches[0][0]), batches[0][1]).backward()
            model.zero_grad()
        log.iteration = -1
        if how != "no_sync":
            sync_every_micro_batch(ddp, batches)
        elif mistake is None:
            accumulate(ddp, batches)
        else:
            accumulate_with_mistake(ddp, batches, mistake)
        runs[how] = {"grad": mlp.flat_grad(model),
                     "launches": [sum(b["iteration"] == m for b in log.buckets)
                                  for m in range(k)]}
    return runs


def reference_gradient(layers, batch_size: int, k: int, world_size: int, seed: int):
    """One process, no DDP: the mean loss over all ``world_size x k x batch_size`` samples."""
    model = mlp.make_model(layers, seed)
    batches = [mlp.make_batch(layers, batch_size, world_size, seed, m) for m in range(k)]
    X = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    F.mse_loss(model(X), y).backward()
    return mlp.flat_grad(model).numpy()


@dataclasses.dataclass
class Accumulation(Result):
    """One optimizer step of ``micro_batches`` micro-batches: DDP's gradient on every rank,
    and the one-process gradient of the whole global batch."""

    world_size: int
    batch_size: int
    micro_batches: int
    mistake: str | None
    param_names: list[str]
    grads: np.ndarray  # (world_size, n): accumulated, then all-reduced once
    reference_grad: np.ndarray  # (n,): one process, mean loss over the global batch
    launches: list[int]  # bucket all-reduces launched by each micro-batch's backward (rank 0)
    launches_without_no_sync: list[int]  # the same micro-batches, each synchronised

    json_extras = ("global_batch_size", "accumulated_grad", "allreduces",
                   "allreduces_without_no_sync", "max_diff", "ratio_to_reference")

    @property
    def allreduces(self) -> int:
        """Bucket all-reduces launched in the optimizer step."""
        return sum(self.launches)

    @property
    def allreduces_without_no_sync(self) -> int:
        return sum(self.launches_without_no_sync)

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.micro_batches * self.world_size

    @property
    def accumulated_grad(self) -> np.ndarray:
        return self.grads[0]

    @property
    def ratio_to_reference(self) -> float:
        """How many times the reference the accumulated gradient is (least squares)."""
        g, r = self.grads[0], self.reference_grad
        return float(g @ r / (r @ r))

    @property
    def max_diff(self) -> float:
        """Largest |DDP's gradient - what its losses asked for|: the reference, times ``k``
        when the losses were not divided by ``k``."""
        scale = self.micro_batches if self.mistake == "loss not divided" else 1
        return float(np.abs(self.grads - scale * self.reference_grad).max())

    def to_json(self) -> dict:
        data = super().to_json()
        data.pop("grads")
        return data

    def describe(self) -> str:
        how = "no_sync" if self.mistake is None else f"no_sync with a mistake: {self.mistake}"
        return "\n".join([
            f"{self.micro_batches} micro-batches of {self.batch_size} samples on "
            f"{self.world_size} ranks ({how}): global batch {self.global_batch_size}",
            f"bucket all-reduces in the step: {self.allreduces} (each micro-batch "
            f"synchronised: {self.allreduces_without_no_sync})",
            f"DDP's gradient is {self.ratio_to_reference:.4f} times the one-process gradient "
            f"of the global batch; largest difference from what the loss asked for: "
            f"{self.max_diff:.1e}"])


def run(world_size: int = 2, batch_size: int = 8, micro_batches: int = 4, seed: int = 0,
        layers=mlp.DEFAULT_LAYERS, mistake: str | None = None, warmup: bool = True,
        backend: str = "auto", timeout: float = 60.0) -> Accumulation:
    """Accumulate ``micro_batches`` micro-batches per rank; compare with one process."""
    layers = mlp.check_layers(layers)
    for name, value in (("batch_size", batch_size), ("micro_batches", micro_batches)):
        positive_int(name, value)
    one_of("mistake", mistake, MISTAKES)
    ranks = ddplab.run(gradients, world_size, backend=backend, timeout=timeout, layers=layers,
                       batch_size=batch_size, k=micro_batches, seed=seed, mistake=mistake,
                       warmup=bool(warmup))
    first = ranks[0]
    return Accumulation(
        world_size=len(ranks), batch_size=batch_size, micro_batches=micro_batches,
        mistake=mistake,
        param_names=[n for n, _ in mlp.make_model(layers, seed).named_parameters()],
        grads=np.stack([r["no_sync"]["grad"] for r in ranks]),
        reference_grad=reference_gradient(layers, batch_size, micro_batches, len(ranks), seed),
        launches=first["no_sync"]["launches"],
        launches_without_no_sync=first["every micro-batch"]["launches"]).on(ranks)


# ---------------------------------------------------------------- the time of a step


def timed_steps(ctx, layers, batch_size: int, k: int, no_sync: bool, iterations: int,
                warmup: int, seed: int) -> list[float]:
    """Seconds of each optimizer step of ``k`` micro-batches (``accumulate``, or
    ``sync_every_micro_batch``), SGD included, after ``warmup`` untimed steps."""
    model = mlp.make_model(layers, seed, init="he").to(ctx.device)
    ddp = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    seconds = []
    for i in range(warmup + iterations):
        batches = micro_batches(ctx, layers, batch_size, k, seed, first=i * k)
        optimizer.zero_grad()
        dist.barrier()
        start = clock.now(ctx.device)
        (accumulate if no_sync else sync_every_micro_batch)(ddp, batches)
        optimizer.step()
        seconds.append(clock.now(ctx.device) - start)
    return seconds[warmup:]


@dataclasses.dataclass
class Timing(Result):
    """Median seconds per optimizer step (slowest rank) for each number of micro-batches."""

    world_size: int
    batch_size: int
    params: int
    micro_batches: list[int]
    no_sync_s: list[float]
    every_micro_batch_s: list[float]

    def describe(self) -> str:
        lines = [f"{self.world_size} ranks, {self.batch_size} samples per micro-batch, "
                 f"{self.params:,} parameters; ms per optimizer step (median)",
                 f"{'k':>3} {'global batch':>12} {'no_sync':>9} {'every micro-batch':>18}"]
        for k, a, b in zip(self.micro_batches, self.no_sync_s, self.every_micro_batch_s):
            lines.append(f"{k:>3} {k * self.batch_size * self.world_size:>12} {1e3 * a:9.1f} "
                         f"{1e3 * b:18.1f}")
        return "\n".join(lines)


def timing(world_size: int = 2, batch_size: int = 8, micro_batches=(1, 2, 4, 8),
           layers=None, iterations: int = 3, progress=None) -> Timing:
    """Time optimizer steps of ``k`` micro-batches, with and without ``no_sync``."""
    layers = mlp.check_layers(LAYERS if layers is None else layers)
    positive_int("batch_size", batch_size)
    for k in micro_batches:
        positive_int("each of micro_batches", k)
    out = {True: [], False: []}
    for i, k in enumerate(micro_batches):
        if progress is not None:
            progress(i, len(micro_batches), f"{k} micro-batches")
        for no_sync in (True, False):
            ranks = ddplab.run(timed_steps, world_size, layers=layers, batch_size=batch_size,
                               k=k, no_sync=no_sync, iterations=iterations, warmup=1, seed=0)
            out[no_sync].append(float(np.median(np.max(ranks, axis=0))))
    return Timing(world_size=world_size, batch_size=batch_size, params=mlp.param_count(layers),
                  micro_batches=list(micro_batches), no_sync_s=out[True],
                  every_micro_batch_s=out[False]).on(ranks)


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--batch-size", type=int, default=8, help="samples per micro-batch")
    parser.add_argument("--micro-batches", type=int, default=4, help="k, per optimizer step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", default=",".join(map(str, mlp.DEFAULT_LAYERS)))
    parser.add_argument("--mistake", choices=[m for m in MISTAKES if m], default=None)
