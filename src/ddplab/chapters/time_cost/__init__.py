"""Chapter 5, the time cost (``book/time_cost.md``): step phases, all-reduce, the cost model.

The measured part: ``step_time``, ``allreduce``, ``scaling``, ``bucket_size``, ``accumulation``
(what ``no_sync`` does to the gradient), ``accumulation_time`` (what it saves), ``compression``
and ``calibration``, all timed with ``ddplab.common.timed_step`` (from a barrier to the end of
``optimizer.step()``, the slowest rank's, the median iteration's, split into forward, backward,
waiting and optimizer so the bars add up) on ``ddplab.common.clock.now``, which synchronises
the rank's CUDA stream before reading ``time.perf_counter``. The modelled part:
``cost_model``, ``latency_fit``, ``utilisation`` and ``cluster_prediction``, arithmetic only,
no torch, each constant named by its source (NCCL 2.29.7-1's ``src/graph/tuning.cc`` and
``topo.h``, stas00/ml-engineering's all-reduce table).

- **Steps alternate.** ``step_time.paired`` trains the same model with and without DDP in one
  call, one step of each in turn, so a change of load on a shared machine reaches both alike.
- **The copy limit** is the fastest of 10 copies of 64 MiB, as STREAM reports its kernels.
- **The fit** ``T(S) = alpha + S/B`` is least squares on relative residuals with both
  constants non-negative (``latency_fit.fit_latency_bandwidth``); where noise would make one
  negative, the better one-parameter fit, flagged ``supported=False``.
- **Utilisation from a record.** The cluster model computes at the MFU of a GPU record for the
  model's size (``utilisation.from_record``), or the reader's own. The record is the one
  measured on the accelerator's own kind of card (``cost_model.Accelerator.record``: the H100
  SXM's for H100 nodes), never the newest: one card's fraction of peak is not another's.
- **The check** asserts measured/model within a factor of 2 at 1 and 2 ranks
  (``calibration.MARGIN``), the computation measured with as many ranks busy.
- **PowerSGD runs in one bucket on gloo**, and bf16 compression through a wrapper that DDP's
  check by name does not refuse (``compression``).
- **The chapter's MLP** uses He initialisation (``mlp.make_model(..., init="he")``), so first-
  layer gradients are not near 1e-10 and fp16 and PowerSGD's errors are seen.

How each of these came to be: ``docs/notes/2026-11-23-time-cost-measurements.md``.
"""
