"""Timing a rank's work: ``time.perf_counter`` after the device has finished what was queued.

On a CPU rank an operation has finished when its call returns, so the host clock times it. On
a GPU a call returns once its kernels are *queued*: a host timestamp then times the launch,
not the work. So :func:`now` first waits for the rank's current CUDA stream, which DDP makes
wait for its all-reduces at the end of backward (``Reducer::finalize_backward`` in
torch/csrc/distributed/c10d/reducer.cpp). Waiting inside a step slows a GPU down a little; CUDA
events (``torch.cuda.Event(enable_timing=True)``) avoid that and are what a GPU profiler uses.

``time.perf_counter`` is one monotonic clock for every process of a machine, so timestamps of
different ranks line up (``CONTRIBUTING.md``).
"""

from __future__ import annotations

import statistics
import time

import torch


def now(device) -> float:
    """Seconds on the machine's monotonic clock, once ``device`` has done
    its queued work."""
    if torch.device(device).type == "cuda":
        torch.cuda.current_stream(device).synchronize()
    return time.perf_counter()


def durations(fn, device, repeats: int, before=None) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn()`` on :func:`now`'s clock; ``before()``
    (a barrier, say) runs untimed before each call."""
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        start = now(device)
        fn()
        times.append(now(device) - start)
    return times


def median_seconds(fn, device, repeats: int, before=None) -> float:
    """The median of :func:`durations`: what a call typically takes."""
    return statistics.median(durations(fn, device, repeats, before))
