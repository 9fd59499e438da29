"""``torch.cuda`` answered by the host: ``is_available`` is True and ``device_count`` the
ranks on this machine for the script's own calls (``mp.spawn(nprocs=device_count())`` starts
the ranks asked for), while torch's internals see the machine as it is; ``set_device``,
``current_device``, ``synchronize``, streams, events (timed on the host), device names and
properties and the memory queries answer as one GPU per rank would, with the host's numbers
where there are any. ``manual_seed(_all)``, ``memory_allocated`` and the cudnn and TF32 flags
already work on a CPU build and are left alone."""

from __future__ import annotations

import contextlib
import os
import time

from ddplab.doctor.ranks import patching
from ddplab.doctor.ranks.cuda_on_cpu.marks import STATE, from_reader, note


class HostEvent:
    """``torch.cuda.Event`` on the host: ``record`` reads the clock, ``elapsed_time`` is in
    milliseconds, as CUDA's."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.at = None

    def record(self, stream=None):
        self.at = time.perf_counter()

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.at - self.at) * 1000.0


class HostStream:
    """``torch.cuda.Stream``: the CPU runs everything in order, so every stream is one."""

    def __init__(self, device=None, priority=0, **kwargs):
        self.device = None

    def synchronize(self):
        pass

    def wait_stream(self, stream):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        event = event or HostEvent()
        event.record()
        return event

    def query(self):
        return True


class HostProperties:
    def __init__(self):
        self.name = "CPU (ddplab doctor: no GPU for this rank)"
        self.total_memory = _host_memory()[1]
        self.major, self.minor = 8, 0
        self.multi_processor_count = os.cpu_count() or 1


def _host_memory() -> tuple[int, int]:
    """(free, total) bytes of this host, from ``/proc/meminfo`` (0s where there is none)."""
    found = {}
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":", 1)
            found[name] = int(value.split()[0]) * 1024
    return found.get("MemAvailable", 0), found.get("MemTotal", 0)


def install() -> None:
    import torch

    def set_device(device):
        note("torch.cuda.set_device")
        index = device.index if isinstance(device, torch.device) else device
        if isinstance(index, str):
            index = torch.device(index).index
        STATE["device"] = index or 0

    def make_is_available(real):
        def is_available():
            return True if from_reader() else real()
        return is_available

    def make_device_count(real):
        def device_count():
            return STATE["ranks"] if from_reader() else real()
        return device_count

    def synchronize(device=None):
        note("torch.cuda.synchronize")

    @contextlib.contextmanager
    def stream(s=None):
        yield s

    class device:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            self.saved, STATE["device"] = STATE["device"], (
                self.index.index if isinstance(self.index, torch.device) else self.index) or 0

        def __exit__(self, *exc):
            STATE["device"] = self.saved

    answers = {
        "set_device": set_device, "synchronize": synchronize,
        "current_device": lambda: STATE["device"],
        "get_device_name": lambda device=None: HostProperties().name,
        "get_device_properties": lambda device=None: HostProperties(),
        "get_device_capability": lambda device=None: (8, 0),
        "is_bf16_supported": lambda including_emulation=True: True,
        "mem_get_info": lambda device=None: _host_memory(),
        "reset_peak_memory_stats": lambda device=None: None,
        "reset_max_memory_allocated": lambda device=None: None,
        "memory_summary": lambda device=None, abbreviated=False: "(CPU: no CUDA memory)",
        "Event": HostEvent, "Stream": HostStream, "stream": stream, "device": device,
        "current_stream": lambda device=None: HostStream(),
        "default_stream": lambda device=None: HostStream(),
        "set_per_process_memory_fraction": lambda fraction, device=None: None,
    }
    for name, answer in answers.items():
        patching.replace(torch.cuda, name, lambda real, answer=answer: answer, "cuda")
    patching.wrap(torch.cuda, "is_available", make_is_available, "cuda")
    patching.wrap(torch.cuda, "device_count", make_device_count, "cuda")
    _accelerator(set_device, synchronize, make_is_available, make_device_count)


def _accelerator(set_device, synchronize, make_is_available, make_device_count) -> None:
    """``torch.accelerator`` (torch 2.6 and later), which scripts written for any GPU call:
    the same answers as ``torch.cuda``'s, the accelerator being ``cuda``."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return

    def make_current(real):
        def current_accelerator(check_available=False):
            return torch.device("cuda") if from_reader() else real(check_available)
        return current_accelerator

    answers = {"set_device_index": set_device, "set_device_idx": set_device,
               "synchronize": synchronize, "current_device_index": lambda: STATE["device"],
               "current_device_idx": lambda: STATE["device"],
               "get_memory_info": lambda device=None: _host_memory()}
    for name, answer in answers.items():
        if hasattr(accelerator, name):
            patching.replace(accelerator, name, lambda real, answer=answer: answer, "cuda")
    patching.wrap(accelerator, "is_available", make_is_available, "cuda")
    patching.wrap(accelerator, "device_count", make_device_count, "cuda")
    patching.wrap(accelerator, "current_accelerator", make_current, "cuda")
