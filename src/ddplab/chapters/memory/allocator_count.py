"""The second measurement, by the allocator the rank's tensors come from.

On a CPU rank, glibc's count of the bytes ``malloc`` has handed out (``malloc_count``). On a
GPU rank that count is wrong twice over: the tensors are not in host memory, and the CUDA
runtime's own host allocations are (on one H100, 821 MB "measured" against 173 MB predicted at
8 M parameters). There the count is the CUDA caching allocator's:
``torch.cuda.memory_allocated``, the bytes of the blocks live tensors occupy (rounded up to
512 bytes; cached but free blocks are not counted), and ``max_memory_allocated`` since
``reset_peak_memory_stats`` for peaks (torch/cuda/memory.py). Both are counted on the host as
tensors are created and freed: ``DeviceCachingAllocator::free`` lowers ``allocated_bytes`` at
once, before it records events for a block used on other streams
(c10/cuda/CUDACachingAllocator.cpp, pytorch main as stored by the search tool, 2026), so
emptying the cache (``emptyCache`` -> ``release_cached_blocks`` ->
``synchronize_and_free_events``) changes the reserved bytes, not this count.

What does change it is who still holds a tensor. Two holders that are not the run's tensors,
seen in one process on one H200 (torch 2.11.0+cu130, NCCL 2.28.9, a probe of DDP at world size
1 on NCCL, variants in a row; ``held_after`` as it is now has not run on a GPU yet):

* ProcessGroupNCCL keeps the tensors of an asynchronous collective (DDP's bucket all-reduces)
  on a shelf until ``work.wait()``; DDP waits on the future, not the work, so its watchdog
  thread hands the shelf over when it sees the collective finished, and the shelf is emptied
  only by the next collective started on the rank's own thread (``TensorShelf``,
  ``shelvesToUnstash_``, ``ProcessGroupNCCL::workEnqueue`` in ProcessGroupNCCL.cpp; the
  watchdog looks every ``kWatchdogThreadSleepMillis``, 100 ms). A bucket DDP rebuilt or a model
  deleted stayed counted (256 MiB of 4 x Linear(4096)) until a later call's first collective
  released it, so the previous call's leftovers came out of the next call's count: the H200
  record's memory rows, and ``tests/test_memory.py``'s GPU test low by the bucket of the run
  before. ``settled`` waits for the watchdog and starts a one-element all-reduce before each
  count, on NCCL groups only (gloo records the streams instead, and lowers the count at free);
* a constant 65 MiB, whatever the model's width (1024 or 4096), appeared with the first
  backward of a process and was never freed: most likely cuBLAS's workspaces (one per handle
  and stream: forward and backward run on different threads, so different handles), which
  torch takes from this allocator. A fresh rank counted it in its first run, a warm one did
  not (the H100 record's 1345.3 MiB lies 65.0 MiB above the calculator's 1280.3).
  ``warm_up`` runs one tiny Linear forward and backward before the first count, so every run
  counts alike.

The peak during ``optimizer.step()`` is measured on GPU ranks only (glibc keeps no peak): the
default Adam on CUDA is the foreach version (``_default_to_fused_or_foreach``, torch/optim/
adam.py line 938 in torch 2.13), whose ``torch._foreach_sqrt(device_exp_avg_sqs)`` (line 790)
allocates a temporary the size of ``exp_avg_sq``, 4 bytes per fp32 parameter, until the step
ends; ``fused=True`` updates in one kernel without it. On CPU the default is the
single-tensor loop (foreach kernels are not offered for CPU, torch/utils/_foreach_utils.py),
one parameter's temporary at a time. Adam's ``step`` counters stay on the host unless
``capturable`` or ``fused`` (adam.py lines 165-176), so a GPU rank's allocator does not see them.
"""

from __future__ import annotations

import dataclasses
import gc
import textwrap
import time

import torch
import torch.distributed as dist

from ddplab.chapters.memory import calculator, malloc_count
from ddplab.common import gpu_record

MiB = 2 ** 20


@dataclasses.dataclass
class Counted:
    allocator: str  # "cuda" (the CUDA caching allocator) or "malloc" (glibc)
    allocated: int | None  # bytes the run left allocated; None without glibc 2.33+
    peak: int | None = None  # most bytes allocated at once during the run, above the start
    step_peak: int | None = None  # last optimizer step: most bytes above its start


class StepPeak:
    """Most bytes allocated during an optimizer step above what its start held (the last
    step's: the first also creates the optimizer's state), and the run's peak so far."""

    def __init__(self, device):
        self.device, self.step_peak, self.run_peak, self._start = device, None, 0, 0

    def attach(self, optimizer) -> None:
        optimizer.register_step_pre_hook(self._before)
        optimizer.register_step_post_hook(self._after)

    def _before(self, optimizer, args, kwargs):
        # the reset below forgets the run's peak so far: keep it first
        self.run_peak = max(self.run_peak, torch.cuda.max_memory_allocated(self.device))
        torch.cuda.reset_peak_memory_stats(self.device)
        self._start = torch.cuda.memory_allocated(self.device)

    def _after(self, optimizer, args, kwargs):
        peak = torch.cuda.max_memory_allocated(self.device)
        self.step_peak = peak - self._start
        self.run_peak = max(self.run_peak, peak)


class _NoWatch:
    def attach(self, optimizer) -> None:
        pass


WATCHDOG_S = 0.1  # ProcessGroupNCCL::kWatchdogThreadSleepMillis: how often it looks


def warm_up(device) -> None:
    """One tiny Linear forward and backward on ``device``: the cuBLAS workspaces of the calling
    thread and of autograd's thread for the device exist from here on (see the module's
    docstring)."""
    layer = torch.nn.Linear(8, 8, device=device)
    layer(torch.ones(2, 8, device=device)).sum().backward()


def settled(device) -> int:
    """``memory_allocated(device)`` once nothing holds tensors of finished collectives: the
    device synchronised, and on an NCCL group the watchdog given time to hand over the shelves
    of what finished, which a one-element all-reduce started here then empties (repeated
    until two counts agree, at most 10 times). Every rank of the group must call it."""
    nccl = dist.is_initialized() and dist.get_backend() == "nccl"
    count = None
    for _ in range(10):
        torch.cuda.synchronize(device)
        gc.collect()  # a warm rank still holds the previous run's garbage
        if nccl:
            time.sleep(1.5 * WATCHDOG_S)
            dist.all_reduce(torch.zeros(1, device=device))  # empties the handed-over shelves
            torch.cuda.synchronize(device)
        last, count = count, torch.cuda.memory_allocated(device)
        if count == last or not nccl:
            break
    return count


def held_after(fn, device):
    """Run ``fn(watch)`` (it calls ``watch.attach(optimizer)``); return its result and what the
    run left allocated, by the allocator of ``device``'s tensors (``Counted``). On CUDA every
    rank of the group must call it (``settled`` starts a collective)."""
    if torch.device(device).type != "cuda":
        result, allocated = malloc_count.held_after(fn, _NoWatch())
        return result, Counted("malloc", allocated)
    warm_up(device)
    before = settled(device)
    torch.cuda.reset_peak_memory_stats(device)
    watch = StepPeak(device)
    result = fn(watch)
    after = settled(device)
    peak = max(watch.run_peak, torch.cuda.max_memory_allocated(device))
    return result, Counted("cuda", after - before, peak - before, watch.step_peak)


# ---------------------------------------------------------------- measured on a GPU, recorded


@dataclasses.dataclass
class Recorded:
    """A GPU record's memory measurement beside the calculator's bytes for the same run."""

    origin: str
    run: str  # what ran
    allocator: str
    rows: list[dict]  # bucket_view, adam, allocated_mib, calculator_mib (computed here)
    note: str

    def ratios(self) -> list[float]:
        return [r["allocated_mib"] / r["calculator_mib"] for r in self.rows]

    def describe(self) -> str:
        lines = [*_wrapped(f"{self.run}, {self.origin}"),
                 f"{'bucket view':>12} {'adam':>18} {self.allocator + ' MiB':>10} "
                 f"{'calculator MiB':>15} {'ratio':>6}"]
        peaks = any(r["step_peak_bytes_per_param"] is not None for r in self.rows)
        lines[-1] += "  step peak, bytes per parameter" if peaks else ""
        for row, ratio in zip(self.rows, self.ratios()):
            peak = row["step_peak_bytes_per_param"]
            lines.append(f"{str(row['bucket_view']):>12} {row['adam']:>18} "
                         f"{row['allocated_mib']:10.2f} {row['calculator_mib']:15.2f} "
                         f"{ratio:6.3f}" + (f"  {peak:.2f}" if peak is not None else ""))
        return "\n".join(lines + _wrapped(self.note))


def _wrapped(text: str) -> list[str]:
    """``text`` in lines that fit a page's column, the lines after the first indented."""
    return textwrap.wrap(text, 78, subsequent_indent="  ", break_on_hyphens=False)


def recorded(record: str | None = None) -> Recorded:
    """The memory measured in a GPU record (default the newest), with the calculator's bytes
    for the same run worked out here."""
    rec = gpu_record.load(record)
    m = rec.data["memory"]
    rows = []
    for row in m["rows"]:
        predicted = calculator.bytes_per_rank(
            m["params"], m["optimizer"], m["strategy"], m["world_size"],
            bucket_view=row["bucket_view"], tensors=m["parameter_tensors"])
        rows.append({"bucket_view": row["bucket_view"], "adam": row.get("adam", "default"),
                     "allocated_mib": row["allocated_mib"],
                     "calculator_mib": sum(predicted.values()) / MiB,
                     "recorded_calculator_mib": row["calculator_mib"],
                     "step_peak_bytes_per_param": row.get("step_peak_bytes_per_param")})
    run = (f"{m['strategy'].upper()} at world size {m['world_size']} on {m['backend']}, "
           f"{m['model']} ({m['params']:,} parameters), {m['optimizer']} in {m['dtype']}, "
           f"after {m['steps']} steps")
    return Recorded(rec.origin, run, m["allocator"], rows, m.get("step_peak_note", ""))
