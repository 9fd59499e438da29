"""The second measurement, by the allocator the rank's tensors come from.

On a CPU rank, glibc's count of the bytes ``malloc`` has handed out (``malloc_count``). On a
GPU rank that count is wrong twice over: the tensors are not in host memory, and the CUDA
runtime's own host allocations are (on one H100, 821 MB "measured" against 173 MB predicted at
8 M parameters, issue 27). There the count is the CUDA caching allocator's:
``torch.cuda.memory_allocated``, the bytes of the blocks live tensors occupy (rounded up to
512 bytes; cached but free blocks are not counted), and ``max_memory_allocated`` since
``reset_peak_memory_stats`` for peaks (torch/cuda/memory.py). Both are counted on the host as
tensors are created and freed, so they need no synchronisation.

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

import torch

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


def held_after(fn, device):
    """Run ``fn(watch)`` (it calls ``watch.attach(optimizer)``); return its result and what the
    run left allocated, by the allocator of ``device``'s tensors (``Counted``)."""
    if torch.device(device).type != "cuda":
        result, allocated = malloc_count.held_after(fn, _NoWatch())
        return result, Counted("malloc", allocated)
    gc.collect()  # a warm rank still holds the previous run's garbage
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    watch = StepPeak(device)
    result = fn(watch)
    gc.collect()
    after = torch.cuda.memory_allocated(device)
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
        lines = [f"{self.run}, {self.origin}",
                 f"{'bucket view':>12} {'adam':>18} {self.allocator + ' MiB':>10} "
                 f"{'calculator MiB':>15} {'ratio':>6}"]
        peaks = any(r["step_peak_bytes_per_param"] is not None for r in self.rows)
        lines[-1] += "  step peak, bytes per parameter" if peaks else ""
        for row, ratio in zip(self.rows, self.ratios()):
            peak = row["step_peak_bytes_per_param"]
            lines.append(f"{str(row['bucket_view']):>12} {row['adam']:>18} "
                         f"{row['allocated_mib']:10.2f} {row['calculator_mib']:15.2f} "
                         f"{ratio:6.3f}" + (f"  {peak:.2f}" if peak is not None else ""))
        return "\n".join(lines + ([self.note] if self.note else []))


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
