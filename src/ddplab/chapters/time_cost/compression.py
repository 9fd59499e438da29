"""Fewer bytes on the wire: DDP's built-in communication hooks, what they send and what it costs.

    python -m ddplab compress --world-size 2 --hook fp16 --seed 0 --json
    torchrun --nproc-per-node 2 -m ddplab compress --hook powersgd --json

The hooks are PyTorch's own (torch/distributed/algorithms/ddp_comm_hooks):

- ``none``: ``default_hooks.allreduce_hook``, what DDP does without a hook (divide, all-reduce);
- ``fp16`` and ``bf16``: ``fp16_compress_hook`` and ``bf16_compress_hook`` cast each bucket to
  16 bits, all-reduce it and cast the result back;
- ``powersgd``: ``powerSGD_hook`` with a ``PowerSGDState``: each gradient matrix ``M`` (n x m)
  is all-reduced as two thin factors ``P`` (n x r) and ``Q`` (m x r) with ``M ~ P Q^T``; 1-D
  tensors (biases), and matrices too small to gain ``min_compression_rate``, go uncompressed
  (Vogels et al. 2019, "PowerSGD: practical low-rank gradient compression").

The bytes a hook puts on the wire are counted at ``torch.distributed.all_reduce``, which these
hooks call, partly from future callbacks after the hook has returned: PowerSGD issues three
all-reduces per bucket, the uncompressed tensors, then P, then Q, each from the callback of the
one before (torch 2.13, powerSGD_hook.py, ``powerSGD_hook``: lines 570, 585 and 607). While
a step runs, that name points at a wrapper that adds up the bytes of every tensor it is given,
then calls the real function. Each rank puts those bytes into the
ring; a ring all-reduce sends ``2(n-1)/n`` times them (see ``cost_model``).

The error is that of the last iteration's averaged gradient against the exact one, DDP's own on
a second copy of the model that sees that batch without a hook: ``|g_hook - g_exact| /
|g_exact|``. No optimizer steps, so the exact gradient of a batch does not depend on the ones
before it, and the copy runs the last batch alone (PowerSGD's error does depend on them, through
its error feedback: the hooked model runs them all).

The hooked model has one bucket (``BUCKET_CAP_MB``). With two, PowerSGD on gloo aborted in 9 of
15 runs (``gloo::EnforceNotMet ... Received data size doesn't match expected size. Is there a
distributed collective mismatch in your code?``; docs/notes/2026-11-23-powersgd-one-bucket-on-
gloo.md): it issues its second and third
all-reduces (P, Q) from callbacks when the one before has finished, on gloo's thread, while
DDP's autograd thread hands it the next bucket, so two ranks can issue their collectives in
different orders. With one bucket, 15 of 15 ran.

**With gloo on CUDA tensors** (one GPU, ranks sharing it) it runs too: torch's hook ran there
on an H200, and with one bucket every rank issues a step's three all-reduces in the same order
(docs/notes/2026-11-26-powersgd-gloo-cuda.md). ``tests/test_placement.py``'s GPU test and
``make gpu-check``'s ``compress --hook powersgd`` on gloo with CUDA tensors confirm it on a GPU.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import statistics
import textwrap

import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.chapters.time_cost.step_time import LAYERS  # the chapter's model
from ddplab.common import clock, mlp
from ddplab.common.checks import int_at_least, one_of, positive_int
from ddplab.common.progress import report as progress_report
from ddplab.common.results import Result
from ddplab.engine.placement import require

COMMAND = "compress"  # python -m ddplab compress

HOOKS = ("none", "fp16", "bf16", "powersgd")
BUCKET_CAP_MB = 100  # one bucket: see the module docstring


def make_hook(name: str, powersgd_rank: int = 1, start_iter: int = 2):
    """``(state, hook)`` for ``ddp.register_comm_hook``. PowerSGD all-reduces uncompressed
    until ``start_powerSGD_iter`` (which must be above 1 with error feedback)."""
    if name == "none":
        return None, default_hooks.allreduce_hook
    if name == "fp16":
        return None, default_hooks.fp16_compress_hook
    if name == "bf16":
        return None, default_hooks.bf16_compress_hook
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=powersgd_rank,
                                        start_powerSGD_iter=start_iter)
    return state, powerSGD_hook.powerSGD_hook


def register(ddp, state, hook) -> str | None:
    """Register ``hook``; where DDP refuses it, say why and run it through a wrapper instead.

    DDP refuses ``bf16_compress_hook`` by its name unless CUDA with NCCL 2.10+ (or XPU) is
    there (``DistributedDataParallel._check_comm_hook``): a check of the build, not of the
    process group. Gloo all-reduces bfloat16 tensors; the wrapper lets it show what it sends.
    """
    try:
        ddp.register_comm_hook(state, hook)
        return None
    except TypeError as exc:
        refused = f"{type(exc).__name__}: {exc}"

    def run_hook(state, bucket):
        return hook(state, bucket)

    ddp.register_comm_hook(state, run_hook)
    return refused


@contextlib.contextmanager
def counting_allreduce(sizes: list):
    """While inside, append the bytes of every tensor given to ``dist.all_reduce``."""
    real = dist.all_reduce

    def all_reduce(tensor, *args, **kwargs):
        sizes.append(tensor.numel() * tensor.element_size())
        return real(tensor, *args, **kwargs)

    dist.all_reduce = all_reduce
    try:
        yield sizes
    finally:
        dist.all_reduce = real


def compressed_steps(ctx, layers, hook: str, powersgd_rank: int, iterations: int, batch_size: int,
                     seed: int) -> dict:
    """``iterations`` forward and backward passes (no optimizer: both copies of the model stay
    equal) with ``hook``; per iteration the bytes sent and the time, and, after the last, the
    error against the same last batch without a hook (the only one reported; without an
    optimizer step the exact gradient of one batch does not depend on the batches before it,
    so the copy without a hook runs that batch alone)."""
    model = mlp.make_model(layers, seed, init="he").to(ctx.device)
    exact_model = copy.deepcopy(model)  # the same weights as a second make_model, less the init
    ddp = DDP(model, bucket_cap_mb=BUCKET_CAP_MB)  # keep both referenced until backward is done
    state, fn = make_hook(hook, powersgd_rank)
    refused = register(ddp, state, fn)
    exact = DDP(exact_model)
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    out = []
    for i in range(iterations):
        X, y = (t[rows].to(ctx.device)
                for t in mlp.make_batch(layers, batch_size, ctx.world_size, seed, i))
        model.zero_grad()
        sent: list = []
        dist.barrier()
        start = clock.now(ctx.device)
        with counting_allreduce(sent):
            F.mse_loss(ddp(X), y).backward()
        seconds = clock.now(ctx.device) - start
        out.append({"bytes_sent": sum(sent), "calls": len(sent), "seconds": seconds})
    F.mse_loss(exact(X), y).backward()
    g, g_exact = mlp.flat_grad(model), mlp.flat_grad(exact_model)
    return {"iterations": out, "refused": refused,
            "rel_error": ((g - g_exact).norm() / g_exact.norm()).item()}


@dataclasses.dataclass
class Compression(Result):
    """What one hook sent and how far its averaged gradient was from the exact one."""

    hook: str
    world_size: int
    params: int
    bytes_uncompressed: int  # float32 gradients: 4 bytes per parameter
    refused: str | None  # the error DDP raised when the hook was registered as it is
    iterations: list[dict]  # rank 0, per iteration: bytes_sent, calls, seconds
    grad_rel_error: float  # the last iteration's, the largest over ranks

    json_extras = ("bytes_sent", "compression", "forward_backward_ms")

    @property
    def measured(self) -> list[dict]:
        """The iterations after PowerSGD's start (the last two): what the figures report."""
        return self.iterations[-2:]

    @property
    def bytes_sent(self) -> int:
        """Per rank per step, what the hook gave ``all_reduce`` (the last iteration)."""
        return self.iterations[-1]["bytes_sent"]

    @property
    def compression(self) -> float:
        return self.bytes_uncompressed / self.bytes_sent

    @property
    def forward_backward_ms(self) -> float:
        """Median forward and backward time of the measured iterations (rank 0): not a step
        (``timed_step``'s ends with the optimizer, which this run leaves out)."""
        return 1e3 * statistics.median(it["seconds"] for it in self.measured)

    def describe(self) -> str:
        lines = [f"hook {self.hook!r}, world size {self.world_size}, {self.params:,} parameters",
                 f"bytes on the wire per rank per step: {self.bytes_sent:,} of "
                 f"{self.bytes_uncompressed:,} ({self.compression:.1f}x fewer)",
                 f"relative error of the averaged gradient: {self.grad_rel_error:.2e}",
                 f"forward and backward: {self.forward_backward_ms:.1f} ms (median)"]
        if self.refused:
            lines.append(textwrap.fill(f"DDP refused the hook itself ({self.refused}); it ran "
                                       f"through a wrapper", 78, subsequent_indent="  ",
                                       break_on_hyphens=False))
        return "\n".join(lines)


def run(world_size: int = 2, hook: str = "fp16", seed: int = 0, layers=None,
        powersgd_rank: int = 1, iterations: int = 4, batch_size: int = 32,
        timeout: float = 60.0) -> Compression:
    """Train ``iterations`` steps' gradients with ``hook`` and report its last one."""
    layers = mlp.check_layers(LAYERS if layers is None else layers)
    one_of("hook", hook, HOOKS)
    for name, value in (("powersgd_rank", powersgd_rank), ("batch_size", batch_size)):
        positive_int(name, value)
    int_at_least("iterations", iterations, 3, "PowerSGD compresses from its third")
    require(hook, ddplab.placement())  # what does not run there, refused
    ranks = ddplab.run(compressed_steps, world_size, timeout=timeout,
                       layers=layers, hook=hook, powersgd_rank=powersgd_rank, iterations=iterations,
                       batch_size=batch_size, seed=seed)
    params = mlp.param_count(layers)
    return Compression.from_ranks(ranks, hook=hook, world_size=len(ranks), params=params,
                                  bytes_uncompressed=4 * params, refused=ranks[0]["refused"],
                                  iterations=ranks[0]["iterations"],
                                  grad_rel_error=max(r["rel_error"] for r in ranks))


# compare(reuse=True)'s results by what each run depended on, the newest REUSED: a panel that
# runs ahead (screen.ahead) runs the world size next door too, which must not drop this one's.
_LAST: dict = {}
REUSED = 32


def compare(hooks=HOOKS, world_size: int = 2, powersgd_rank: int = 1, seed: int = 0,
            progress=None, reuse: bool = False) -> dict:
    """:func:`run` for each hook: ``{hook: Compression}``; ``powersgd_rank`` is PowerSGD's
    matrix rank. ``progress`` hears of each run, and before each run but the first gets as
    ``partial`` every hook, those done with their result and the rest None (a panel draws the
    rows filled so far). ``reuse`` (the lab's panel): a hook whose run would be the same as in
    a recent call (only PowerSGD depends on ``powersgd_rank``) keeps that call's result
    instead of running again, so a move of the rank runs PowerSGD alone, and the others are
    on screen before it starts."""
    out, kept = {}, {}
    where = ddplab.placement()  # a run on another placement is another run
    for i, hook in enumerate(hooks):
        key = (where, hook, world_size, seed, powersgd_rank if hook == "powersgd" else None)
        again = reuse and key in _LAST
        partial = {h: out.get(h) for h in hooks} if out and not again else None
        progress_report(progress, i, len(hooks), hook, partial=partial)
        out[hook] = _LAST[key] if again else run(world_size, hook, seed,
                                                  powersgd_rank=powersgd_rank)
        kept[key] = out[hook]
    if reuse:
        for key, result in kept.items():
            _LAST.pop(key, None)  # the newest last
            _LAST[key] = result
        while len(_LAST) > REUSED:
            _LAST.pop(next(iter(_LAST)))
    progress_report(progress, len(hooks), len(hooks), "done")
    return out


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--hook", choices=HOOKS, default="fp16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--powersgd-rank", "--rank", dest="powersgd_rank", type=int, default=1,
                        help="PowerSGD's matrix rank (--rank: the same)")
    parser.add_argument("--layers", default=None, help="MLP widths (default 16 x 512 x 512)")
