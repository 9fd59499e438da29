"""How much of a GPU's peak a training step uses, by model size: from measurements, not a flat
assumption.

The cost model turns FLOPs into seconds at a model FLOPs utilisation (MFU). Large runs report
40-50% (PaLM: 46.2%, Chowdhery et al. 2022, table 3), but a model of a few hundred million
parameters keeps a GPU far less busy: GPT-2 shapes from 124 M to 1.3 B parameters measured
10-21% eager and 22-38% under ``torch.compile`` on one H100 (a reported run), and 17-36% and
34-47% on one H200 (``benchmarks/gpu.py``; ``ddplab.common.gpu_record``: the two records were
not made by the same script). A flat 40% made the computation of 124 M-355 M models look
1.4-4.1 times faster than the H100 measured, 1.0-2.4 times than the H200 did, and so their
communication look larger. Without a name, the newest record
is used; every value's source names its card. The cluster model names the record of its own
card (``cost_model.Accelerator.record``): a fraction measured on one card is not another's. The
H200 has the H100 SXM's dense BF16 peak (989 TFLOP/s) but more memory bandwidth, and ran the
same models 1.24-1.94 times faster than the H100 record.

``from_record`` interpolates the record's MFU linearly in ``log(params)`` between the two
recorded sizes around ``params`` (MFU rose roughly evenly per doubling of size in the record).
Above the largest size it keeps the largest's, which stays below what much larger models
reach, so there the model errs on the slow side. Below the smallest, keeping the smallest's
would err the other way: a smaller model keeps a GPU less busy still, so its computation would
look too fast. There it extrapolates, a model and labelled as one: the rise between the two
smallest sizes carried down as a power of the size, ``MFU = u0 (params / n0) ** k`` with
``k = log(u1 / u0) / log(n1 / n0)``, which falls towards zero and never below it. Where the
record does not rise there (``k <= 0``), or holds one size only, it keeps the smallest's.
Every value carries its source.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap

from ddplab.common import gpu_record
from ddplab.common.checks import positive_number


@dataclasses.dataclass(frozen=True)
class Utilisation:
    value: float  # a fraction of the accelerator's peak FLOP/s
    source: str


def from_record(params: float, compiled: bool = True, record: str | None = None) -> Utilisation:
    """The MFU of a model of ``params`` parameters, eager or compiled, from a GPU record
    (``record``: a name in ``gpu_record.names()``; default the newest)."""
    positive_number("params", params)
    rec = gpu_record.load(record)
    mode = "compiled" if compiled else "eager"
    points = rec.points(mode)
    if not points:
        raise ValueError(f"the GPU record {rec.name} has no {mode} rows; pass compiled="
                         f"{not compiled} or another record ({', '.join(gpu_record.names())})")
    how = f"{mode}, {rec.origin}"

    def size(n):
        return f"{n / 1e9:.2g} B" if n >= 1e9 else f"{n / 1e6:.0f} M"

    if params < points[0][0] and len(points) > 1 and points[1][1] > points[0][1]:
        (n0, u0), (n1, u1) = points[:2]
        value = u0 * (params / n0) ** (math.log(u1 / u0) / math.log(n1 / n0))
        return Utilisation(value, f"MFU {value:.1%}, extrapolated below the record's smallest "
                                  f"size along its rise from {size(n0)} ({u0:.1%}) to "
                                  f"{size(n1)} ({u1:.1%}): a model ({how})")
    if params <= points[0][0] or params >= points[-1][0]:
        n, value = points[0] if params <= points[0][0] else points[-1]
        edge = "at" if params == n else "clamped to"
        return Utilisation(value, f"MFU {value:.1%} {edge} the record's {size(n)} "
                                  f"parameters ({how})")
    for (n0, u0), (n1, u1) in zip(points, points[1:]):
        if n0 <= params <= n1:
            t = (math.log(params) - math.log(n0)) / (math.log(n1) - math.log(n0))
            value = u0 + t * (u1 - u0)
            return Utilisation(value, f"MFU {value:.1%}, interpolated in log(params) between "
                                      f"the record's {size(n0)} ({u0:.1%}) and {size(n1)} "
                                      f"({u1:.1%}) ({how})")
    raise AssertionError("unreachable: params lies between the first and last points")


def given(value: float) -> Utilisation:
    """A utilisation the reader sets, as a fraction of peak."""
    positive_number("utilisation", value)
    if value > 1:
        raise ValueError(f"utilisation is a fraction of peak, at most 1, got {value!r}")
    return Utilisation(value, f"MFU {value:.1%}, set by the reader")


def describe_record(record: str | None = None) -> str:
    """The record's MFU by model size, eager and compiled, and where it was measured."""
    rec = gpu_record.load(record)
    lines = [textwrap.fill(f"model FLOPs utilisation, {rec.origin}:", 78,
                           subsequent_indent="  "),
             f"{'parameters':>14} {'batch':>6} {'eager':>7} {'compiled':>9}"]
    for params in sorted({r["params"] for r in rec.rows}):
        by_mode = {r["mode"]: r for r in rec.rows if r["params"] == params}
        cells = [f"{by_mode[m]['mfu_percent']:.1f}%" if by_mode.get(m, {}).get("mfu_percent")
                 else "-" for m in gpu_record.MODES]
        lines.append(f"{params:>14,} {next(iter(by_mode.values()))['batch_size']:>6} "
                     f"{cells[0]:>7} {cells[1]:>9}")
    return "\n".join(lines)


def describe_sizes(sizes, compiled: bool = True, record: str | None = None) -> str:
    """For each model size (parameters), the utilisation :func:`from_record` gives and where
    it comes from, one paragraph each, wrapped for a page's column."""
    return "\n".join(textwrap.fill(f"{params / 1e6:,.0f} M parameters: "
                                   f"{from_record(params, compiled, record).source}", 78,
                                   subsequent_indent="    ") for params in sizes)
