"""Gradient accumulation with ``no_sync``: one all-reduce per optimizer step instead of k.

    python -m ddplab accumulate --world-size 2 --batch-size 8 --micro-batches 4 --seed 0 --json
    torchrun --nproc-per-node 2 -m ddplab accumulate --batch-size 8 --micro-batches 4 --json

Each rank runs ``k`` micro-batches of ``batch_size`` samples before one optimizer step. While
``ddp.require_backward_grad_sync`` is False (what ``ddp.no_sync()`` sets inside its block) DDP
launches no all-reduce and autograd adds the gradients up in ``.grad``; the next backward with
it True all-reduces the sum (``DistributedDataParallel.no_sync`` and ``_post_forward``, torch
2.13 distributed.py). With every loss divided by ``k``, that is the gradient of one batch of
``batch_size x k x world_size`` samples: the global batch of the optimizer step. Micro-batch
``m`` of rank ``r`` is rows ``r*B`` to ``(r+1)*B`` of iteration ``m`` of ``mlp.make_batch``.

``accumulate`` is the loop to copy (nanoGPT's three lines); ``accumulate_with_mistake`` makes
one of the two classic mistakes with ``no_sync`` on purpose, to show what each does. What it
saves in time is ``accumulation_time``'s.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common import hooks, mlp
from ddplab.common.checks import one_of, positive_int
from ddplab.common.results import Result
from ddplab.common.threads import one_thread

COMMAND = "accumulate"  # python -m ddplab accumulate

MISTAKES = (None, "loss not divided", "forward outside no_sync")


def accumulate(ddp, batches) -> None:
    """The gradient of all micro-batches, all-reduced once (nanoGPT's train.py)."""
    for m, (X, y) in enumerate(batches):
        # what ddp.no_sync() sets in its block; DDP reads it at the end of forward
        ddp.require_backward_grad_sync = m == len(batches) - 1
        (F.mse_loss(ddp(X), y) / len(batches)).backward()


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


def micro_batches(ctx, layers, batch_size: int, count: int, seed: int, first: int = 0) -> list:
    """This rank's ``count`` micro-batches, iterations ``first`` to ``first + count - 1``."""
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    return [tuple(t[rows].to(ctx.device)
                  for t in mlp.make_batch(layers, batch_size, ctx.world_size, seed, first + m))
            for m in range(count)]


def sync_every_micro_batch(ddp, batches) -> None:
    """The same gradient as :func:`accumulate`, all-reduced after every micro-batch."""
    for X, y in batches:
        (F.mse_loss(ddp(X), y) / len(batches)).backward()


def gradients(ctx, layers, batch_size: int, count: int, seed: int, mistake,
              warmup: bool) -> dict:
    """One optimizer step's accumulated gradient, and the bucket all-reduces each micro-batch's
    backward launched, with ``no_sync`` (or ``mistake``) and with every micro-batch
    synchronised, and the parameters' names. ``warmup`` runs one synchronised backward first
    (its gradient dropped), so that DDP has rebuilt its buckets: its first backward
    all-reduces a single bucket."""
    model = mlp.make_model(layers, seed).to(ctx.device)
    # the same weights for the second run: a copy, made before DDP wraps the first (cheaper
    # than a second init)
    models = {"no_sync": model, "every micro-batch": copy.deepcopy(model)}
    runs = {"names": [name for name, _ in model.named_parameters()]}
    batches = micro_batches(ctx, layers, batch_size, count, seed)
    for how, model in models.items():
        ddp = DDP(model)  # keep a reference: a DDP freed before backward never all-reduces
        log = hooks.BucketLog(model, ctx.world_size)
        ddp.register_comm_hook(log, hooks.record_and_allreduce)
        # Each forward starts the next micro-batch: its backward's buckets are tagged with it.
        model.register_forward_pre_hook(lambda *_, log=log: setattr(log, "iteration",
                                                                    log.iteration + 1))
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
                                  for m in range(count)]}
    return runs


def reference_gradient(layers, batch_size: int, count: int, world_size: int, seed: int):
    """One process, no DDP: the mean loss over all ``world_size x count x batch_size`` samples
    (``count`` micro-batches of every rank)."""
    model = mlp.make_model(layers, seed)
    batches = [mlp.make_batch(layers, batch_size, world_size, seed, m) for m in range(count)]
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

    def json_fields(self) -> dict:
        data = super().json_fields()
        data.pop("grads")
        return data

    def describe(self) -> str:
        mistake = [] if self.mistake is None else [f"  with a mistake: {self.mistake}"]
        return "\n".join([
            f"{self.micro_batches} micro-batches of {self.batch_size} samples on "
            f"{self.world_size} ranks (no_sync): global batch {self.global_batch_size}",
            *mistake,
            f"bucket all-reduces in the step: {self.allreduces} (each micro-batch "
            f"synchronised: {self.allreduces_without_no_sync})",
            f"DDP's gradient is {self.ratio_to_reference:.4f} times the one-process gradient "
            f"of the global batch;",
            f"  largest difference from what the loss asked for: {self.max_diff:.1e}"])


def run(world_size: int = 2, batch_size: int = 8, micro_batches: int = 4, seed: int = 0,
        layers=mlp.DEFAULT_LAYERS, mistake: str | None = None, warmup: bool = True,
        timeout: float = 60.0) -> Accumulation:
    """Accumulate ``micro_batches`` micro-batches per rank; compare with one process."""
    layers = mlp.check_layers(layers)
    for name, value in (("batch_size", batch_size), ("micro_batches", micro_batches)):
        positive_int(name, value)
    one_of("mistake", mistake, MISTAKES)
    ranks = ddplab.run(gradients, world_size, timeout=timeout, layers=layers,
                       batch_size=batch_size, count=micro_batches, seed=seed, mistake=mistake,
                       warmup=bool(warmup))
    first = ranks[0]
    with one_thread():  # 10 against 16-20 ms on two threads here, idle (common.threads)
        reference = reference_gradient(layers, batch_size, micro_batches, len(ranks), seed)
    return Accumulation.from_ranks(
        ranks,
        world_size=len(ranks), batch_size=batch_size, micro_batches=micro_batches,
        mistake=mistake,
        param_names=first["names"],
        grads=np.stack([r["no_sync"]["grad"] for r in ranks]),
        reference_grad=reference,
        launches=first["no_sync"]["launches"],
        launches_without_no_sync=first["every micro-batch"]["launches"])


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--batch-size", type=int, default=8, help="samples per micro-batch")
    parser.add_argument("--micro-batches", type=int, default=4, help="k, per optimizer step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", default=",".join(map(str, mlp.DEFAULT_LAYERS)))
    parser.add_argument("--mistake", choices=[m for m in MISTAKES if m], default=None)
