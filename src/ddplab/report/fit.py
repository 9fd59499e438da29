"""The all-reduce fit ``T(S) = alpha + S/B``, kept physical: alpha >= 0 and B > 0.

``cost_model.fit_latency_bandwidth`` is an unconstrained least-squares fit; on a loaded machine
small messages can take longer than larger ones (a 4 KiB all-reduce took 280 us against 264 us
for 256 KiB here) and the fit's latency or inverse bandwidth comes out negative. Where that
happens this adapter refits on the boundary, as a non-negative least squares would: the same
relative residuals with alpha = 0 (B alone) or with 1/B = 0 (alpha alone), keeping the better,
and says the data could not support both constants.

TODO(lead): the gpu-bench branch adds the constrained fit to ``cost_model`` itself; once it has
landed, call it here instead of ``_boundary_fit``.
"""

from __future__ import annotations

import dataclasses

from ddplab.chapters.time_cost import cost_model


@dataclasses.dataclass(frozen=True)
class Fit:
    alpha_s: float
    bandwidth: float  # bytes/s; inf where only a latency could be fitted
    supported: bool  # both constants positive in the unconstrained fit
    note: str

    def seconds(self, nbytes: float) -> float:
        return self.alpha_s + nbytes / self.bandwidth


def _residual(sizes, seconds, alpha: float, inverse_bandwidth: float) -> float:
    return sum(((alpha + s * inverse_bandwidth) - t) ** 2 / t ** 2 for s, t in zip(sizes, seconds))


def _boundary_fit(sizes, seconds) -> tuple[float, float]:
    """Least squares on relative residuals with one constant held at zero: ``(alpha, 1/B)``."""
    u = [1 / t for t in seconds]  # the alpha column of the relative-residual system
    v = [s / t for s, t in zip(sizes, seconds)]  # the 1/B column
    only_bandwidth = (0.0, sum(v) / sum(x * x for x in v))
    only_latency = (sum(u) / sum(x * x for x in u), 0.0)
    return min(only_bandwidth, only_latency, key=lambda c: _residual(sizes, seconds, *c))


def fit(sizes, seconds) -> Fit:
    """The chapter's fit where it is physical, else the best fit on the boundary."""
    if len(sizes) < 2:
        raise ValueError("a fit of alpha and B needs at least two message sizes")
    alpha, bandwidth = cost_model.fit_latency_bandwidth(sizes, seconds)
    if alpha >= 0 and bandwidth > 0:
        return Fit(alpha, bandwidth, True, "")
    raw = (f"alpha {1e6 * alpha:.0f} us, B {bandwidth / 1e9:.3g} GB/s")
    alpha, inverse = _boundary_fit(sizes, seconds)
    held = "latency at 0" if alpha == 0 else "bandwidth at infinity"
    return Fit(alpha, 1 / inverse if inverse > 0 else float("inf"), False,
               f"the times cannot support both constants (unconstrained fit: {raw}); fitted "
               f"with the {held}: measure again on a quieter machine")
