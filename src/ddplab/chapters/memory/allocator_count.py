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

from ddplab.chapters.memory import malloc_count


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
