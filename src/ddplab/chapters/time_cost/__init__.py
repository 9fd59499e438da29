"""Chapter 5, the time cost (``book/time_cost.md``): step phases, all-reduce, the cost model.

What is measured and what is modelled (the measurements: ``benchmarks/RESULTS.md``).

Chapter "The time cost" (`step_time`, `allreduce`, `scaling`, `bucket_size`, `accumulation`
(what `no_sync` does to the gradient), `accumulation_time` (what it saves), `compression`,
`calibration`, all timed with `ddplab.common.clock.now`, which synchronises the
rank's CUDA stream before reading `time.perf_counter`; `cost_model`, `latency_fit`,
`utilisation` and `cluster_prediction` are arithmetic only, no torch).

- **One timed step.** `ddplab.common.timed_step` is the step every chapter times: "Buckets"
  (`overlap`), "The time cost" (`step_time`, `accumulation_time`), the hangs chapter's
  `find_unused_parameters` cost and the memory chapter's strategies. A step runs from a barrier
  to the end of `optimizer.step()`; an iteration's step is its slowest rank's (DDP makes every
  rank wait for it); a run's step is the median iteration's (the upper middle for an even
  count: a step that was measured), and its phases, forward, backward (computing, up to the
  last gradient), waiting (from there to the end of `backward()`, plus naive's blocking
  all-reduces) and optimizer, are that step's, so the bars add up to the number beside them.
  Until this round `overlap` measured first rank's start to last rank's end and drew a fourth
  bar "rest" (optimizer and skew) where `step_time` drew "optimizer"; the memory chapter read
  `perf_counter` without waiting for a GPU.
- **The cost model's constants** name their source by file, line and version: NCCL 2.29.7-1
  (`src/graph/tuning.cc`, `src/graph/topo.h`) and stas00/ml-engineering's measured all-reduce
  table, which gives the bandwidth a message of each size reaches across nodes.

- **Steps alternate.** `step_time.paired` trains the same model with and without DDP in one
  call, one step of each in turn (as `accumulation_time` does with and without `no_sync`), so a
  change of load on a shared machine reaches both alike.
  Calibrating the model from separate runs put measured/model at 0.6 to 2.5 on this VM under
  load; with alternating steps it stayed between 0.9 and 1.4 (load average 6 to 9 on 2 cores).
- **The copy limit** is the fastest of 10 copies of 64 MiB (as STREAM reports its kernels): a
  median moved between 1.5 and 6 GB/s with the other jobs' load, the fastest stayed near 6.
- **The fit** `T(S) = alpha + S/B` is least squares on relative residuals (every size counts
  alike), solved as 2 x 2 normal equations in `latency_fit.fit_latency_bandwidth`, with both
  constants non-negative: where the unconstrained solution has one negative (under load a 4 KiB
  all-reduce took 280 us and a 256 KiB one 264 us, issue 29), the better of the two
  one-parameter fits, flagged `supported=False` with a note (`AllReduce.fit_supported`).
- **Utilisation from a record.** The cluster model computes at a model FLOPs utilisation taken
  from a GPU record (`utilisation.from_record`): the record's MFU for the model's size, eager
  or compiled (default), interpolated linearly in log(params) between recorded sizes, clamped
  above the largest (slow side) and extrapolated below the smallest as a power of the size
  fitted to the two smallest (clamping there made small models too fast; labelled a model in
  the source); or the reader's own (`cluster_prediction.run(utilisation=)`). It was a
  flat 40% (PaLM's figure), which one H100 measured 1.4-4.1x above what 124 M-355 M models reach
  (issue 27's script), one H200 1.0-2.4x (`benchmarks/gpu.py`). The cluster model takes the
  record measured on its accelerator's own kind of card (`cost_model.Accelerator.record`: the
  H100 SXM's for H100 nodes), never the newest: the H200 shares the H100 SXM's dense BF16 peak
  but not its memory bandwidth, and ran the same models 1.24-1.94x faster, so one card's
  fraction is not another's (the time-cost page computes the ratio from the two records).
- **The check** asserts measured/model within a factor of 2 at 1 and 2 ranks (`calibration.
  MARGIN`); the computation is measured with as many ranks busy (two ranks share the memory
  bandwidth of one machine, which two GPUs do not).
- **PowerSGD needs one bucket on gloo.** With DDP's default two buckets, `powerSGD_hook` aborted
  in 9 of 15 runs (`gloo::EnforceNotMet ... Is there a distributed collective mismatch`): it
  issues its second all-reduce from a future callback on gloo's thread while DDP's autograd
  thread hands it the next bucket, so ranks can issue collectives in different orders. With
  `bucket_cap_mb=100` (one bucket) 15 of 15 ran. `compression` uses one bucket.
- **bf16 on gloo.** DDP refuses `bf16_compress_hook` by its *name* without CUDA and NCCL 2.10
  (`_check_comm_hook`); gloo all-reduces bfloat16, so `compression.register` runs it through a
  wrapper and reports the refusal.
- **The chapter's MLP** uses He initialisation (`mlp.make_model(..., init="he")`): with torch's
  default, 16 layers of 512 leave first-layer gradients near 1e-10, which makes fp16 underflow
  and PowerSGD's rank 1 look exact.
"""
