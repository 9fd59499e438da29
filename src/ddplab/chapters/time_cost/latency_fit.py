"""The all-reduce's latency and bandwidth, fitted to measured times: ``T(S) = alpha + S / B``.

The fitted line becomes the cost model's link (``cost_model.link_from_fit``); the chapter's
``allreduce`` fits every sweep it measures. Both constants are a cost, so neither may be
negative, however noisy the times.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class LatencyBandwidthFit(NamedTuple):
    """``T(S) = alpha_s + S / bandwidth``; ``supported`` is False where the times contradict
    the model (a coefficient came out negative unconstrained and was held at zero), ``note``
    says which and why."""

    alpha_s: float
    bandwidth: float  # bytes/s; math.inf where the times show no cost per byte
    supported: bool
    note: str

    def seconds(self, nbytes: float) -> float:
        """The fitted time of an all-reduce of ``nbytes``."""
        return self.alpha_s + nbytes / self.bandwidth


def fit_latency_bandwidth(sizes, seconds) -> LatencyBandwidthFit:
    """``alpha >= 0`` and ``1/B >= 0`` of ``T(S) = alpha + S / B`` by least squares on
    *relative* residuals, ``sum(((alpha + S/B) - T) / T)^2``: every size counts alike, where
    plain least squares would let the largest messages alone set alpha.

    Non-negative least squares in two unknowns: the unconstrained solution (the 2 x 2 normal
    equations) where both come out non-negative; otherwise the better of the two one-parameter
    fits, latency only or bandwidth only (the optimum of a convex problem whose unconstrained
    optimum is infeasible lies on the boundary). Noisy times do that: on a loaded 2-core
    machine a 4 KiB all-reduce took 280 us and a 256 KiB one 264 us, which an
    unconstrained fit turns into a negative cost per byte."""
    sizes, seconds = list(sizes), list(seconds)
    if len(sizes) != len(seconds) or len(set(sizes)) < 2:
        raise ValueError(f"a fit of T(S) = alpha + S/B needs times at 2 or more distinct sizes, "
                         f"got sizes {sizes!r} and {len(seconds)} times")
    if min(sizes) <= 0 or min(seconds) <= 0:
        raise ValueError("sizes and times must be positive")
    rows = [(1 / t, s / t) for s, t in zip(sizes, seconds)]  # (alpha, 1/B) -> 1
    a11 = sum(u * u for u, _ in rows)
    a12 = sum(u * v for u, v in rows)
    a22 = sum(v * v for _, v in rows)
    b1 = sum(u for u, _ in rows)
    b2 = sum(v for _, v in rows)
    det = a11 * a22 - a12 * a12
    alpha = (b1 * a22 - b2 * a12) / det
    inverse_bandwidth = (a11 * b2 - a12 * b1) / det
    if alpha >= 0 and inverse_bandwidth >= 0:
        return LatencyBandwidthFit(alpha, _bandwidth(inverse_bandwidth), True, "")

    def residual(a, x):
        return sum((u * a + v * x - 1) ** 2 for u, v in rows)

    latency_only, bytes_only = (b1 / a11, 0.0), (0.0, b2 / a22)
    a, x = min(latency_only, bytes_only, key=lambda ax: residual(*ax))
    held = "1/B" if x == 0 else "alpha"
    note = (f"the times do not support a fit: unconstrained, alpha = {alpha * 1e6:.3g} us and "
            f"1/B = {inverse_bandwidth:.3g} s/byte; {held} held at 0")
    return LatencyBandwidthFit(a, _bandwidth(x), False, note)


def _bandwidth(inverse_bandwidth: float) -> float:
    return math.inf if inverse_bandwidth == 0 else 1 / inverse_bandwidth
