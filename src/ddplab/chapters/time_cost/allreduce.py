"""How long does an all-reduce take, against the size of the message and the number of ranks?

    python -m ddplab allreduce --world-size 2 --sizes 4K,64K,1M,16M --json
    torchrun --nproc-per-node 2 -m ddplab allreduce --sizes 4K,64K,1M,16M --json

Every rank all-reduces a float32 tensor of each size ``repeats`` times, each call after a
barrier, timed on :func:`ddplab.common.clock.now`; a size's time is the median over the
calls on the slowest rank (a collective ends when its last rank is done). The figures are
nccl-tests' (doc/PERFORMANCE.md in NVIDIA/nccl-tests): the algorithm bandwidth ``algbw = S / t``
and, for an all-reduce, the bus bandwidth ``busbw = algbw * 2(n-1)/n``: what each rank's link
carried, comparable across world sizes. The constants of ``T(S) = alpha + S / B`` are fitted by
``latency_fit.fit_latency_bandwidth``.

In the same run, rank 0 alone copies a large tensor (``dst.copy_(src)``) while the other ranks
wait: the memory-copy bandwidth of one rank, the limit to set busbw against. A byte that moves
from one process to another is copied at least once, and gloo on one machine moves its bytes
through the kernel's loopback sockets. A limit is the best the machine does, so the copy is
timed as STREAM times its kernels (McCalpin, STREAM benchmark): the fastest of its trials
(``COPY_TRIALS``), which other work on a shared machine can only slow down.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import torch.distributed as dist

import ddplab
from ddplab.chapters.time_cost import latency_fit
from ddplab.common import clock
from ddplab.common.checks import positive_int
from ddplab.common.results import Result

COMMAND = "allreduce"  # python -m ddplab allreduce

KiB, MiB = 2 ** 10, 2 ** 20
SIZES = tuple(4 * KiB * 4 ** i for i in range(8))  # 4 KiB, 16 KiB, ... 64 MiB
# The lab's panel stops at 16 MiB, about one DDP bucket (25 MiB by default): the 64 MiB calls
# took 54-58% of a run at 2 and 4 ranks (a loaded 2-core machine, 7 repeats), which every
# slider move re-runs, and busbw was no higher there than at 16 MiB.
PANEL_SIZES = SIZES[:-1]
COPY_BYTES = 64 * MiB  # far larger than the caches
COPY_TRIALS = 10


def measure(ctx, sizes, repeats: int, copy_bytes: int) -> dict:
    """This rank's median seconds per all-reduce of each size, and rank 0's copy time."""
    seconds = []
    for size in sizes:
        tensor = torch.ones(size // 4, device=ctx.device)
        dist.all_reduce(tensor)  # the first call of a size sets up its buffers: not timed
        seconds.append(clock.median_seconds(lambda: dist.all_reduce(tensor), ctx.device,  # noqa: B023
                                            repeats, before=dist.barrier))
    copy_seconds = None
    dist.barrier()
    if ctx.rank == 0:  # alone: the other ranks wait in the barrier below
        src = torch.ones(copy_bytes // 4, device=ctx.device)
        dst = torch.empty_like(src)
        dst.copy_(src)  # touch every page once before timing
        copy_seconds = min(clock.durations(lambda: dst.copy_(src), ctx.device, COPY_TRIALS))
    dist.barrier()
    return {"seconds": seconds, "copy_seconds": copy_seconds}


@dataclasses.dataclass
class AllReduce(Result):
    """Median all-reduce times per message size at one world size, and the copy limit."""

    world_size: int
    sizes_bytes: list[int]
    seconds: list[float]  # per size: median over calls, slowest rank
    copy_bytes: int
    copy_seconds: float  # rank 0 alone, fastest of COPY_TRIALS

    json_extras = ("algbw", "busbw", "alpha_s", "bandwidth_bytes_per_s", "fit_supported",
                   "copy_bandwidth_bytes_per_s", "busbw_over_copy")

    @property
    def algbw(self) -> list[float]:
        """Bytes per second: ``S / t``."""
        return [s / t for s, t in zip(self.sizes_bytes, self.seconds)]

    @property
    def busbw(self) -> list[float]:
        """``algbw * 2(n-1)/n`` (nccl-tests, doc/PERFORMANCE.md); 0 at world size 1."""
        factor = 2 * (self.world_size - 1) / self.world_size
        return [b * factor for b in self.algbw]

    @functools.cached_property
    def fit(self) -> latency_fit.LatencyBandwidthFit:
        """Fitted once per result: ``alpha_s``, ``bandwidth_bytes_per_s``, ``fit_supported``
        and the fitted times all read it."""
        return latency_fit.fit_latency_bandwidth(self.sizes_bytes, self.seconds)

    @property
    def fit_supported(self) -> bool:
        """False where noisy times gave a negative constant and the fit held it at 0."""
        return self.fit.supported

    @property
    def alpha_s(self) -> float:
        return self.fit[0]

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.fit[1]

    @property
    def copy_bandwidth_bytes_per_s(self) -> float:
        return self.copy_bytes / self.copy_seconds

    @property
    def busbw_over_copy(self) -> float:
        """The best busbw measured, as a share of the copy bandwidth."""
        return max(self.busbw) / self.copy_bandwidth_bytes_per_s

    def describe(self) -> str:
        lines = [f"all-reduce of float32 tensors, world size {self.world_size} "
                 f"(median, slowest rank)",
                 f"{'size':>10} {'time ms':>9} {'algbw GB/s':>11} {'busbw GB/s':>11} "
                 f"{'fit ms':>8}"]
        for size, t, alg, bus in zip(self.sizes_bytes, self.seconds, self.algbw, self.busbw):
            lines.append(f"{human(size):>10} {1e3 * t:9.3f} {alg / 1e9:11.3f} {bus / 1e9:11.3f} "
                         f"{1e3 * self.fit.seconds(size):8.3f}")
        lines += [f"fit T(S) = alpha + S/B: alpha = {1e6 * self.alpha_s:.0f} us, "
                  f"B = {self.bandwidth_bytes_per_s / 1e9:.3f} GB/s"
                  + ("" if self.fit.supported else f" ({self.fit.note})"),
                  f"memory copy (rank 0 alone, {human(self.copy_bytes)}, fastest of "
                  f"{COPY_TRIALS}): "
                  f"{self.copy_bandwidth_bytes_per_s / 1e9:.2f} GB/s; best busbw is "
                  f"{self.busbw_over_copy:.0%} of it"]
        return "\n".join(lines)


def human(nbytes: float) -> str:
    """Bytes as B, KiB or MiB."""
    for unit, size in (("MiB", MiB), ("KiB", KiB)):
        if nbytes >= size:
            return f"{nbytes / size:.3g} {unit}"
    return f"{nbytes:.0f} B"


def check_sizes(sizes) -> tuple[int, ...]:
    """Sizes in bytes: ints, or text such as "4K,64K,1M" (K = KiB, M = MiB); multiples of 4."""
    if isinstance(sizes, str):
        try:
            sizes = [_parse_size(s) for s in sizes.split(",")]
        except ValueError:
            raise ValueError(f"sizes must be comma-separated byte counts such as 4K,64K,1M, "
                             f"got {sizes!r}") from None
    sizes = tuple(sizes)
    if not sizes:
        raise ValueError("sizes must name at least one message size")
    for size in sizes:
        positive_int("every size", size)
        if size % 4:
            raise ValueError(f"every size must be a multiple of 4 bytes (float32), got {size}")
    return sizes


def _parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    factor = {"K": KiB, "M": MiB}.get(text[-1:], 1)
    return int(text[:-1] if factor > 1 else text) * factor


def run(world_size: int = 2, sizes=SIZES, repeats: int = 7, copy_bytes: int = COPY_BYTES,
        timeout: float = 60.0) -> AllReduce:
    """Time all-reduces of every size in ``sizes`` (bytes) on ``world_size`` ranks."""
    sizes = check_sizes(sizes)
    positive_int("repeats", repeats)
    positive_int("copy_bytes", copy_bytes)
    ranks = ddplab.run(measure, world_size, timeout=timeout, sizes=sizes,
                       repeats=repeats, copy_bytes=copy_bytes - copy_bytes % 4)
    return AllReduce.from_ranks(ranks, world_size=len(ranks), sizes_bytes=list(sizes),
                                seconds=[max(r["seconds"][i] for r in ranks)
                                         for i in range(len(sizes))],
                                copy_bytes=copy_bytes - copy_bytes % 4,
                                copy_seconds=ranks[0]["copy_seconds"])


def sweep(world_sizes=(2, 4), sizes=SIZES, repeats: int = 7, progress=None) -> dict:
    """:func:`run` at each world size: ``{world_size: AllReduce}``."""
    out = {}
    for i, world_size in enumerate(world_sizes):
        if progress is not None:
            progress(i, len(world_sizes), f"world size {world_size}")
        out[world_size] = run(world_size, sizes, repeats)
    return out


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--sizes", default=",".join(human(s).replace(" ", "").replace("iB", "")
                                                    for s in SIZES),
                        help="message sizes in bytes, K = KiB, M = MiB (default 4K,...,64M)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per size")
