"""Mixed precision written for CUDA: ``torch.autocast("cuda")`` (and ``torch.cuda.amp.autocast``)
runs as CPU autocast in bfloat16, the CPU's fast half precision, whatever dtype was asked for;
``GradScaler()`` / ``GradScaler("cuda")`` (and ``torch.cuda.amp.GradScaler``) as an enabled CPU
scaler (torch's own would disable itself on a machine without CUDA, and the scaler's mistakes
would go unseen)."""

from __future__ import annotations

from ddplab.doctor.ranks import patching
from ddplab.doctor.ranks.cuda_on_cpu.marks import note


def install() -> None:
    import torch
    from torch.amp import GradScaler
    from torch.amp.autocast_mode import autocast

    def make_autocast(real):
        def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
            if device_type == "cuda":
                note("autocast('cuda') -> autocast('cpu', bfloat16)")
                device_type, dtype = "cpu", torch.bfloat16
            return real(self, device_type, dtype=dtype, enabled=enabled,
                        cache_enabled=cache_enabled)
        return __init__

    def make_scaler(real):
        def __init__(self, device="cuda", *args, **kwargs):
            if device == "cuda":
                note("GradScaler('cuda') -> GradScaler('cpu')")
                device = "cpu"
            return real(self, device, *args, **kwargs)
        return __init__

    patching.wrap(autocast, "__init__", make_autocast, "cuda")
    patching.wrap(GradScaler, "__init__", make_scaler, "cuda")
