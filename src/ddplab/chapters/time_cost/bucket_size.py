"""Overlap and bucket size: the communication backward does not hide, against the bucket cap.

    from ddplab.chapters.time_cost import bucket_size
    sweep = bucket_size.run(caps=(100, 8, 4, 2, 1, 0.001), world_size=2)

Each cap is a ``step_time.run`` of the chapter's MLP with that ``bucket_cap_mb``; its exposed
communication is the median wait from backward's last gradient to the end of ``backward()``.
The bucket count of each cap follows DDP's packing rule (``bucket_rule.pack``), which the
chapter "Buckets" checks against recorded buckets.
"""

from __future__ import annotations

import dataclasses

from ddplab.chapters.time_cost import step_time
from ddplab.common import bucket_rule, mlp
from ddplab.common.progress import report as progress_report


def bucket_count(layers, bucket_cap_mb) -> int:
    """How many buckets DDP makes for ``mlp.make_model(layers)`` after its rebuild: DDP's rule
    (``bucket_rule.pack``) over the gradient-ready order, each layer's bias before its weight,
    last layer first (as recorded in the chapter "Buckets")."""
    sizes = []
    for n_in, n_out in reversed(list(zip(layers[:-1], layers[1:]))):
        sizes += [4 * n_out, 4 * n_in * n_out]
    return len(bucket_rule.pack(sizes, bucket_rule.bucket_limits(bucket_cap_mb)))


@dataclasses.dataclass
class BucketSweep:
    """DDP's steps at one world size for several bucket caps."""

    caps: list  # bucket_cap_mb values
    buckets: list[int]  # DDP's bucket count for each
    runs: list  # step_time.StepTime per cap

    @property
    def exposed_s(self) -> list[float]:
        """Median seconds of waiting after backward's last gradient."""
        return [r.median("waiting") for r in self.runs]

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
                 layers=step_time.LAYERS, iterations: int = 7, progress=None) -> BucketSweep:
    """Time DDP's steps with each ``bucket_cap_mb`` in ``caps``."""
    layers = mlp.check_layers(layers)
    runs = []
    for i, cap in enumerate(caps):
        progress_report(progress, i, len(caps), f"bucket_cap_mb {cap}")
        runs.append(step_time.run(world_size, batch_size, layers, bucket_cap_mb=cap,
                        iterations=iterations))
    progress_report(progress, len(caps), len(caps), "done")
    return BucketSweep(list(caps), [bucket_count(layers, cap) for cap in caps], runs)
