"""CUDA on CPU ranks (``ddplab.doctor.ranks.cuda_on_cpu``) in parts: SyncBatchNorm's statistics
all-reduced over gloo give what one process gives on the whole batch; nothing is mapped where
there is a GPU per rank; what cannot run on a CPU is named. The whole scripts run in
``test_doctor_corpus.py`` (``cuda_hardcoded.py``, ``plain_nccl_cpu.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from ddplab.doctor.launch.diagnose import diagnose

SYNCED = textwrap.dedent('''
    import os, sys
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    from ddplab.doctor.ranks.cuda_on_cpu import ddp, marks

    def rank_fn(rank, port):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=2)
        torch.manual_seed(0)
        bn = torch.nn.SyncBatchNorm(3)
        with torch.no_grad():
            bn.weight.uniform_(0.5, 1.5), bn.bias.uniform_(-1, 1)
        x = (torch.arange(60.0).view(20, 3) ** 1.5 / 10)[rank * 12:rank * 12 + 8 + 4 * rank]
        x = x.clone().requires_grad_()  # unequal shards: 8 and 12 rows
        y = ddp._synced_batch_norm(bn, x)
        (y * torch.arange(3.0)).sum().backward()
        torch.save({"y": y.detach(), "grad": x.grad, "w": bn.weight.grad,
                    "mean": bn.running_mean, "var": bn.running_var},
                   os.path.join(sys.argv[1], f"{rank}.pt"))
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(rank_fn, args=(int(sys.argv[2]),), nprocs=2)
''')


def test_synced_batch_norm_is_one_batch_norm_over_every_rank(tmp_path):
    import socket

    script = tmp_path / "synced.py"
    script.write_text(SYNCED)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run([sys.executable, str(script), str(tmp_path), str(port)],
                          capture_output=True, text=True, timeout=180,
                          env=dict(os.environ, GLOO_SOCKET_IFNAME="lo"))
    assert done.returncode == 0, done.stderr
    ranks = [torch.load(tmp_path / f"{r}.pt") for r in range(2)]
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(3)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5), bn.bias.uniform_(-1, 1)
    x = torch.cat([(torch.arange(60.0).view(20, 3) ** 1.5 / 10)[r * 12:r * 12 + 8 + 4 * r]
                   for r in range(2)]).requires_grad_()
    y = bn(x)
    (y * torch.arange(3.0)).sum().backward()
    torch.testing.assert_close(torch.cat([r["y"] for r in ranks]), y.detach())
    torch.testing.assert_close(torch.cat([r["grad"] for r in ranks]), x.grad)
    torch.testing.assert_close(ranks[0]["w"] + ranks[1]["w"], bn.weight.grad)  # DDP's sum
    for r in ranks:
        torch.testing.assert_close(r["mean"], bn.running_mean)
        torch.testing.assert_close(r["var"], bn.running_var)
    assert ranks[0]["grad"].abs().sum() > 0  # not vacuous


def test_nothing_is_mapped_with_a_gpu_per_rank(monkeypatch):
    from ddplab.doctor.ranks import cuda_on_cpu

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    cuda_on_cpu.install()
    assert not cuda_on_cpu.active()
    assert torch.Tensor.to is torch._C.TensorBase.to or not hasattr(torch.Tensor.to, "__wrapped__")


@pytest.mark.parametrize("call,named", [
    ("import torch.utils.cpp_extension as e\n"
     "e.load_inline('k', cpp_sources='', cuda_sources='__global__ void k() {}')",
     "a custom CUDA extension (torch.utils.cpp_extension.load_inline) cannot run on a CPU"),
    ("import triton", "Triton (import triton) compiles GPU kernels only"),
])
def test_what_cannot_run_on_a_cpu_is_named(tmp_path, call, named):
    script = tmp_path / "kernel.py"
    script.write_text("import torch.distributed as dist\ndist.init_process_group('nccl')\n"
                      + call + "\n")
    diagnosis = diagnose(str(script), cwd=str(tmp_path), world_size=1)
    assert named in diagnosis.crash.error, diagnosis.crash
    assert f"{script}\", line {3 + call.count(chr(10))}" in diagnosis.crash.traceback
