"""DDP's bucket assignment, written out: what sets the layout, to compare with the recording.

    from ddplab.chapters.buckets import buckets
    from ddplab.common import bucket_rule
    result = buckets.run(bucket_cap_mb=0.01, iterations=3)
    assert [result.params(i) for i in range(3)] == bucket_rule.expected_layouts(result)

Sources: torch/nn/parallel/distributed.py (``_BucketCapacityConfig``, ``_ddp_init_helper``) and
the C++ reducer, torch/csrc/distributed/c10d/reducer.cpp (``compute_bucket_assignment_by_size``,
``Reducer::autograd_hook``, ``Reducer::rebuild_buckets``) and reducer.hpp
(``should_rebuild_buckets``).
"""

from __future__ import annotations

import math

import torch.distributed as dist

MiB = 1024 * 1024
DEFAULT_CAP_MB = 25  # torch/nn/parallel/distributed.py, _DEFAULT_BUCKET_CAP_MB


def bucket_limits(bucket_cap_mb: float | None) -> tuple[int, int]:
    """(first bucket's limit, later buckets' limit) in bytes, as DDP
    sets them (``_BucketCapacityConfig``, nn/parallel/distributed.py).

    The cap defaults to 25 MiB. The first bucket gets 1 MiB
    (``dist._DEFAULT_FIRST_BUCKET_BYTES``) only while ``bucket_cap_mb``
    is left at None: a cap you pass, even 25, applies to every bucket.
    """
    mb = DEFAULT_CAP_MB if bucket_cap_mb is None else bucket_cap_mb
    cap = int(mb * MiB)
    if bucket_cap_mb is None:
        return dist._DEFAULT_FIRST_BUCKET_BYTES, cap
    return cap, cap


def pack(sizes, limits) -> list[list[int]]:
    """Group positions 0..n-1 into buckets (reducer.cpp,
    ``compute_bucket_assignment_by_size``): a bucket closes as soon as
    its bytes reach the current limit, so one large tensor overshoots
    it; the next bucket takes the next limit; the last limit repeats."""
    buckets, current, total, k = [], [], 0, 0
    for i, size in enumerate(sizes):
        current.append(i)
        total += size
        if total >= limits[k]:
            buckets.append(current)
            current, total, k = [], 0, min(k + 1, len(limits) - 1)
    return buckets + ([current] if current else [])


def expected_layouts(result) -> list[list[list[str]]]:
    """The parameter names of each bucket, per iteration, by DDP's rule, for a
    ``buckets.Buckets`` result's settings and gradient-ready order.

    The first layout (``DistributedDataParallel._ddp_init_helper``,
    ``_BucketCapacityConfig.compute_bucket_size_limits``) is one bucket of every parameter,
    except with ``find_unused_parameters`` and no ``static_graph``: then the parameters are
    packed in registration order and the buckets reversed, guessing that gradients come back
    in reverse. ``Reducer::rebuild_buckets`` packs them once more, in the order their
    gradients really became ready, before the 2nd forward (with ``static_graph``, before the
    3rd), and never with ``find_unused_parameters`` alone (``should_rebuild_buckets``).
    """
    names, sizes = result.param_names, result.param_bytes
    first, cap = bucket_limits(result.bucket_cap_mb)
    if result.find_unused_parameters and not result.static_graph:
        initial = [[names[i] for i in b] for b in reversed(pack(sizes, [first, cap]))]
        return [initial] * len(result.layouts)
    order = result.ready_order
    ready_sizes = [sizes[names.index(n)] for n in order]
    rebuilt = [[order[i] for i in b] for b in pack(ready_sizes, [first, cap])]
    rebuild_at = 2 if result.static_graph else 1
    return [[list(names)] if i < rebuild_at else rebuilt for i in range(len(result.layouts))]


def check_cap(bucket_cap_mb) -> None:
    if bucket_cap_mb is None:
        return
    if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) \
            or not math.isfinite(bucket_cap_mb) or bucket_cap_mb <= 0:
        raise ValueError(f"bucket_cap_mb must be None (DDP's default) or a positive number of "
                         f"MiB, got {bucket_cap_mb!r}")
