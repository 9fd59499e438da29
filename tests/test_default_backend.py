"""``init_process_group()`` with no backend, as the doctor's fix for ``duplicate-rank`` says of
torch 2.13: one backend, the one registered for the accelerator torch finds on the machine
(``BackendConfig.__init__``'s ``Backend.UNDEFINED`` branch, ``torch/distributed/
distributed_c10d.py``), not gloo and NCCL side by side routed by each tensor's device. Here,
without a GPU, gloo for the CPU alone; on a CUDA machine, NCCL for CUDA alone."""

import torch
from torch.distributed.distributed_c10d import Backend, BackendConfig

from ddplab.doctor.judging import checks


def test_no_backend_gives_the_detected_accelerators_backend_alone():
    found = torch._C._get_accelerator().type
    config = BackendConfig(Backend(Backend.UNDEFINED))
    assert str(config) == f"{found}:{Backend.default_device_backend_map[found]}"
    assert Backend.default_device_backend_map["cuda"] == "nccl"


def test_the_fix_says_so():
    fix = next(c.fix for c in checks.CHECKS if c.id == "duplicate-rank")
    text = " ".join(line.strip().lstrip("# ") for line in fix.splitlines())
    assert "NCCL alone on a CUDA machine" in text and "gloo where there is none" in text
