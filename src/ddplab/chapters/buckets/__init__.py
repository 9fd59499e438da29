"""Chapter 4, buckets (``book/buckets.md``): how DDP groups gradients and overlaps backward.

Where torch 2.13 differs from the starting design notes, checked live on the chapter's page
against `torch/nn/parallel/distributed.py`
and `torch/csrc/distributed/c10d/reducer.cpp`:

- Iteration 0 all-reduces **one** bucket holding every parameter (the limit is `sys.maxsize`
  unless `find_unused_parameters=True` without `static_graph`); the capped layout appears from
  iteration 1, when buckets are rebuilt in gradient-ready order.
- With `find_unused_parameters=True` alone, buckets are never rebuilt: the capped layout in
  reversed registration order is kept on every iteration.
- The 1 MiB "first bucket" is a threshold, not a size: a bucket closes once it reaches the limit,
  so the default's first bucket can be much larger (4 MiB in the chapter's model). It applies
  only while `bucket_cap_mb` is left at `None`; passing 25 explicitly gives plain 25 MiB buckets.
- `_get_ddp_logging_data()` keeps stale `bucket_sizes` but also has `rebuilt_bucket_sizes`
  (sizes only, from iteration 2's forward): only a comm hook sees names, order and times.
- `static_graph=True`: iterations 0 and 1 are one bucket, iteration 0's all-reduce waits until
  after backward, and the rebuild happens before iteration 2.
"""
