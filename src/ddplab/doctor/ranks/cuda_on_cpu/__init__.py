"""A script written for GPUs, run unedited on CPU ranks: where this machine has fewer GPUs
than ranks, the script's CUDA lands on the CPU and what was mapped is recorded (the report's
first line says it). Where it has a GPU per rank, nothing here is installed.

- ``devices``: device arguments, ``.cuda()``, ``.to("cuda")``, ``pin_memory``, through torch's
  override point (a ``TorchFunctionMode``); a tensor the script put on ``cuda`` is marked
  (``marks``), so ``cpu-tensor-nccl`` judges by where the author put it;
- ``host_cuda``: ``torch.cuda``'s functions, answered by the host;
- ``precision``: autocast and GradScaler written for CUDA;
- ``ddp``: DDP's ``device_ids`` and SyncBatchNorm over gloo;
- ``refusals``: a custom CUDA extension or Triton, named in the error.

NCCL runs as gloo and ``init_process_group(device_id=)`` drops the GPU (``watch.group``).
"""

from __future__ import annotations

import os

import ddplab.doctor.records as records
from ddplab.doctor.ranks import recorder as _recorder
from ddplab.doctor.ranks.cuda_on_cpu import ddp, devices, host_cuda, precision, refusals
from ddplab.doctor.ranks.cuda_on_cpu.marks import NOTED, STATE, active, device_type
from ddplab.doctor.settings import Settings

__all__ = ["active", "device_type", "install"]


def ranks_here() -> int:
    """The ranks on this machine: torchrun's ``LOCAL_WORLD_SIZE``, else the doctor's."""
    return int(os.environ.get("LOCAL_WORLD_SIZE") or Settings.current().world_size)


_GPUS = "DDPLAB_DOCTOR_GPUS"  # the GPUs this machine has, before a mapped rank hid them


def install() -> None:
    """Map CUDA onto the CPU where this machine has fewer GPUs than ranks; the GPUs it has are
    hidden from the rank first (a CPU rank must not see a GPU: torch picks some paths by
    ``torch.cuda.is_available()``)."""
    import torch

    if STATE["on"]:  # a forked child: a recorder of its own
        NOTED.clear()
        _recorder.RECORDER.add(records.CudaOnCpu(gpus=STATE["gpus"], ranks=STATE["ranks"]))
        if not any(type(m).__name__ == "CudaOnCpu" for m in _modes()):
            devices.mode_class()().__enter__()
        return
    # a rank the script spawns itself (mp.spawn) inherits the hiding, and the count before it
    gpus = int(os.environ.get(_GPUS) or torch.cuda.device_count())
    ranks = ranks_here()
    if gpus >= ranks:
        return
    os.environ[_GPUS], os.environ["CUDA_VISIBLE_DEVICES"] = str(gpus), ""
    STATE.update(on=True, gpus=gpus, ranks=ranks)
    _recorder.RECORDER.add(records.CudaOnCpu(gpus=gpus, ranks=ranks))
    for part in (host_cuda, precision, ddp, refusals):
        part.install()
    devices.install_module_devices()
    devices.install_generator()
    devices.install_device_index()
    devices.mode_class()().__enter__()


def _modes() -> list:
    from torch.overrides import _get_current_function_mode_stack

    return _get_current_function_mode_stack()
