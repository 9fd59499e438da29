"""The second measurement: the bytes the process's C allocator has handed out and not taken back,
before and after the run, as glibc counts them (``mallinfo2()``: ``uordblks``, bytes in use in
its heaps, plus ``hblkhd``, bytes in blocks it mmapped on its own). torch's CPU tensors come
from ``posix_memalign`` (``c10::alloc_cpu``, c10/core/impl/alloc_cpu.cpp in torch's source),
and gloo's buffers from ``malloc`` too, so the difference sees every tensor the run still
holds, and also what the tensor count leaves out: the batch, the loss, autograd's and gloo's
own buffers, malloc's headers.

``gc.collect()`` runs on both sides: a warm rank process still holds the previous run's
garbage, and freeing it during the window would pull the difference down.

Why not torch's profiler (``profile_memory=True``)? It records allocations and frees only on
the threads it follows; FSDP2's communication buffers are freed elsewhere, and its net count
for an FSDP run came out about three times the tensors held (tried on torch 2.13).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mallinfo2():
    """glibc's ``mallinfo2`` (glibc 2.33 and later), or None where there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        function = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    function.restype = _MallInfo2
    return function


_MALLINFO2 = _mallinfo2()


def in_use() -> int | None:
    """Bytes ``malloc`` has handed out and not had back; None without glibc 2.33+."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return info.uordblks + info.hblkhd


def held_after(fn, *args, **kwargs):
    """Run ``fn``; return its result and the bytes its run left in use (None: no glibc)."""
    gc.collect()
    before = in_use()
    result = fn(*args, **kwargs)
    gc.collect()
    after = in_use()
    return result, None if before is None else after - before
