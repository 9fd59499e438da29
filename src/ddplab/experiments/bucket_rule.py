"""DDP's bucket assignment, written out: what sets the layout, to compare with the recording.

    from ddplab.experiments import bucket_rule, buckets
    result = buckets.run(bucket_cap_mb=0.01, iterations=3)
    assert [result.params(i) for i in range(3)] == bucket_rule.expected_layouts(result)

Sources: torch/nn/parallel/distributed.py (``_BucketCapacityConfig``, ``_ddp_init_helper``) and
the C++ reducer, torch/csrc/distributed/c10d/reducer.cpp (``compute_bucket_assignment_by_size``,
``Reducer::autograd_hook``, ``Reducer::rebuild_buckets``) and reducer.hpp
(``should_rebuild_buckets``).
"""

from __future__ import annotations

from ddplab.experiments.buckets import Buckets, bucket_limits


def pack(sizes, limits) -> list[list[int]]:
    """Group positions 0..n-1 into buckets: a bucket closes as soon as its bytes reach the
    current limit (so a large tensor overshoots it), and the next bucket takes the next limit;
    the last limit repeats (reducer.cpp, ``compute_bucket_assignment_by_size``)."""
    buckets, current, total, k = [], [], 0, 0
    for i, size in enumerate(sizes):
        current.append(i)
        total += size
        if total >= limits[k]:
            buckets.append(current)
            current, total, k = [], 0, min(k + 1, len(limits) - 1)
    return buckets + ([current] if current else [])


def expected_layouts(result: Buckets) -> list[list[list[str]]]:
    """The parameter names of each bucket, per iteration, by DDP's rule (not by recording).

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
