"""Overlap and bucket size: the communication backward does not hide, against the bucket cap.

    from ddplab.chapters.time_cost import bucket_size
    sweep = bucket_size.run(caps=(100, 8, 4, 2, 1, 0.001), world_size=2)

Each cap is a ``step_time.run`` of the chapter's MLP with that ``bucket_cap_mb``; its exposed
communication is the median wait from backward's last gradient to the end of ``backward()``.
The bucket count of each cap follows DDP's packing rule (``bucket_rule.pack``), which the
chapter "Buckets" checks against recorded buckets.

Beside it, a simple model of the trade-off, derived on the page (not taken from elsewhere):
``E(n_b) = S/(n_b w) + n_b o``, :class:`Tradeoff`, whose curve the figure draws.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ddplab.chapters.time_cost import step_time
from ddplab.common import bucket_rule, mlp
from ddplab.common.progress import report as progress_report
from ddplab.common.results import Result


def algorithm_bandwidth(bus_bandwidth: float, ranks: int) -> float:
    """``algbw = busbw * n / (2(n-1))``: the bytes of the message per second of the whole
    all-reduce (nccl-tests, doc/PERFORMANCE.md), the ``w`` of :func:`exposed_tradeoff`."""
    if ranks < 2:
        raise ValueError("an all-reduce needs at least 2 ranks")
    return bus_bandwidth * ranks / (2 * (ranks - 1))


def exposed_tradeoff(buckets, nbytes: float, bandwidth: float, overhead_s: float):
    """A simple model of the bucket trade-off, ``S/(n_b w) + n_b o``: the last bucket
    (``S/n_b`` bytes at the all-reduce's algorithm bandwidth ``w``) cannot start before
    backward ends, and each of ``n_b`` calls adds a fixed ``o`` to the end of the step (it
    does where the calls' fixed costs run one after the other, as on the cores of a CPU)."""
    return nbytes / (buckets * bandwidth) + buckets * overhead_s


def best_bucket_count(nbytes: float, bandwidth: float, overhead_s: float) -> float:
    """Where ``d/dn_b [S/(n_b w) + n_b o] = -S/(n_b^2 w) + o = 0``: ``sqrt(S / (w o))``."""
    return math.sqrt(nbytes / (bandwidth * overhead_s))


@dataclasses.dataclass
class Tradeoff:
    """The model ``S/(n_b w) + n_b o`` for ``nbytes`` of gradient, evaluated where it is
    drawn (``buckets``, from 1 to ``max_buckets`` on a log scale), and its minimum."""

    nbytes: float
    bandwidth: float  # w: the all-reduce's algorithm bandwidth, bytes/s
    overhead_s: float  # o: the fixed cost of one call
    buckets: list[float]
    exposed_s: list[float]

    @property
    def best(self) -> float:
        return best_bucket_count(self.nbytes, self.bandwidth, self.overhead_s)

    def exposed(self, buckets: float) -> float:
        """The model's exposed seconds with ``buckets`` buckets."""
        return exposed_tradeoff(buckets, self.nbytes, self.bandwidth, self.overhead_s)

    @property
    def best_is_a_minimum(self) -> bool:
        """Half or twice the best bucket count exposes no less (the derivation checked)."""
        return self.exposed(self.best) <= min(self.exposed(self.best / 2),
                                              self.exposed(2 * self.best))

    def describe(self, measured_best: int | None = None) -> str:
        measured = "" if measured_best is None else f"; measured: least exposed with " \
                                                    f"{measured_best}"
        return f"model: n_b* = sqrt(S / (w o)) = {self.best:.1f} buckets{measured}"


def tradeoff(nbytes: float, bandwidth: float, overhead_s: float,
             max_buckets: float = 32) -> Tradeoff:
    """:func:`exposed_tradeoff` on 60 bucket counts from 1 to ``max_buckets``."""
    grid = [float(n) for n in np.geomspace(1, max_buckets, 60)]
    return Tradeoff(nbytes, bandwidth, overhead_s, grid,
                    [exposed_tradeoff(n, nbytes, bandwidth, overhead_s) for n in grid])


def bucket_count(layers, bucket_cap_mb) -> int:
    """How many buckets DDP makes for ``mlp.make_model(layers)`` after its rebuild: DDP's rule
    (``bucket_rule.pack``) over the gradient-ready order, each layer's bias before its weight,
    last layer first (as recorded in the chapter "Buckets")."""
    sizes = []
    for n_in, n_out in reversed(list(zip(layers[:-1], layers[1:]))):
        sizes += [4 * n_out, 4 * n_in * n_out]
    return len(bucket_rule.pack(sizes, bucket_rule.bucket_limits(bucket_cap_mb)))


@dataclasses.dataclass
class BucketSweep(Result):
    """DDP's steps at one world size for several bucket caps."""

    caps: list  # bucket_cap_mb values
    buckets: list[int]  # DDP's bucket count for each
    runs: list  # step_time.StepTime per cap

    @property
    def exposed_s(self) -> list[float]:
        """Median seconds of waiting after backward's last gradient."""
        return [r.median("waiting") for r in self.runs]

    @property
    def gradient_bytes(self) -> int:
        """S: the float32 gradient every step all-reduces."""
        return 4 * self.runs[0].params

    def model(self, allreduce) -> Tradeoff:
        """The trade-off model for this gradient, with ``w`` and ``o`` from an all-reduce fit
        (``allreduce.AllReduce``: its bandwidth and its fixed cost ``alpha``), drawn up to this
        sweep's largest bucket count."""
        return tradeoff(self.gradient_bytes, allreduce.bandwidth_bytes_per_s, allreduce.alpha_s,
                        max_buckets=max(self.buckets))

    @property
    def best_buckets(self) -> int:
        """The bucket count with the least exposed communication."""
        return self.buckets[self.exposed_s.index(min(self.exposed_s))]

    def describe(self) -> str:
        lines = [f"{'bucket_cap_mb':>13} {'buckets':>8} {'exposed ms':>11} {'step ms':>8}"]
        for cap, n, r in zip(self.caps, self.buckets, self.runs):
            lines.append(f"{cap:>13g} {n:>8} {r.waiting_ms:11.1f} {r.step_ms:8.1f}")
        return "\n".join(lines)


def run(caps=(100, 8, 4, 2, 1, 0.001), world_size: int = 2, batch_size: int = 32,
                 layers=step_time.LAYERS, iterations: int = 7, progress=None,
                 timeout: float = 60.0) -> BucketSweep:
    """Time DDP's steps with each ``bucket_cap_mb`` in ``caps``."""
    layers = mlp.check_layers(layers)
    runs = []
    for i, cap in enumerate(caps):
        progress_report(progress, i, len(caps), f"bucket_cap_mb {cap}")
        runs.append(step_time.run(world_size, batch_size, layers, bucket_cap_mb=cap,
                        iterations=iterations, timeout=timeout))
    progress_report(progress, len(caps), len(caps), "done")
    return BucketSweep.from_ranks(runs, list(caps), [bucket_count(layers, cap) for cap in caps],
                                  runs)
