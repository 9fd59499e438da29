"""Chapter 7, memory (``book/memory.md``): what each rank holds, why DDP runs out of it, and
when ZeRO or FSDP helps.

How the bytes are counted.

A rank counts its bytes by category after the optimizer step, before `zero_grad`, from the
tensors it holds, each distinct storage once (`common.ledger.Ledger`:
`untyped_storage().data_ptr()`; a `DTensor` counts its `to_local()`), so a gradient that is a
view into a bucket counts once. DDP's bucket tensors are seen through a comm hook that keeps
them (`accounting.record_bucket`) and then calls `default_hooks.allreduce_hook`. The second,
independent measurement is glibc's `mallinfo2()` (bytes in use) before and after the run, with
`gc.collect()` on both sides (warm ranks still hold the previous run's garbage); the profiler's
`profile_memory=True` counts about 3x the bytes for FSDP (docs/notes/2026-11-25-gpu-records-
and-memory-on-gpu.md). Where glibc is older than 2.33 the second measurement is null. The
calculator's formulas live once, in `calculator.py`; the page's JavaScript is translated from
that source through `ast` at build time, and a test runs both over a grid (under `node`, where
present).

**On a GPU rank** the second measurement is the CUDA caching allocator's
(`allocator_count`): `torch.cuda.memory_allocated` before and after the run, the run's peak
(`max_memory_allocated`, reset at the start), and the last `optimizer.step()`'s peak above its
start, through the optimizer's step pre/post hooks (the default Adam on CUDA is foreach, whose
`_foreach_sqrt(exp_avg_sq)`, torch/optim/adam.py line 790 in 2.13, holds 4 bytes per parameter
during the step; `fused=True` does not). Host `malloc` on a GPU rank counted the CUDA runtime
(821 MB against 173 MB predicted at 8 M parameters on an H100). `Memory.allocator` says which
one a result counted with. Not yet run on a GPU here: `tests/test_memory.py`'s GPU test is
skipped without one.

The calculator is the steady state (after backward, through the step) with a precision scheme
per row: `autocast` (the default: fp32 parameters, gradients, buckets and state, what
`torch.autocast` keeps), `fp32`, `bf16_master` (bf16 parameters and gradients with an fp32
master copy, the ZeRO paper's accounting; `ZeroRedundancyOptimizer` has no such mode) and
`fsdp_policy` (FSDP2's `MixedPrecisionPolicy`: fp32 shards, bf16 only in the all-gathered layer
while it runs). `precision.py` runs autocast (DDP, ZeRO-1, FSDP) and the policy on real ranks
and counts them the same way; they equal the calculator. `largest_model` leaves room for the
step's temporaries: foreach Adam's copy of `exp_avg_sq` (the GPU default; 4 bytes per parameter
stepped) and a master copy's fp32 gradients; a test sees the copy with a spy on
`torch._foreach_sqrt`. The GPU's measured peak is not in it.
"""
