"""``nn.DataParallel`` or ``DistributedDataParallel``? The same model and batch under both.

    python -m ddplab data-parallel --world-size 2 --json

``DataParallel`` is one process. Each forward it scatters the batch over the GPUs, replicates
the module onto every GPU (its parameters copied again, every step), runs the replicas in
threads of that one process and gathers the outputs on the first GPU; backward sums the
replicas' gradients into the module there (``DataParallel.forward``, torch 2.13
``torch/nn/parallel/data_parallel.py``). Without a GPU it finds no device
(``_get_available_device_type()`` is None), keeps ``device_ids = []`` and its forward just calls
the module: one process, one replica, no scatter. That is what a CPU machine can show of it.

``DistributedDataParallel`` is one process per device, each with its own copy of the model
made once, its own share of the batch, and its gradients averaged by all-reduces in buckets
while backward runs. No thread shares a GIL, nothing is replicated per step, and it runs across
machines; PyTorch's ``DataParallel`` docstring recommends DDP instead "even if there is only a
single node".
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.checks import an_int, int_in_range, positive_int
from ddplab.common.mlp import flat_grad, make_batch, make_model
from ddplab.common.results import Result

COMMAND = "data-parallel"  # python -m ddplab data-parallel

LAYERS = (8, 32, 32, 4)


def ddp_step(ctx, batch_size: int, seed: int) -> dict:
    """One forward and backward of this rank's share under DDP: its process id, its gradient
    and how many bucket all-reduces backward launched."""
    model = make_model(LAYERS, seed).to(ctx.device)
    ddp = DDP(model)  # keep a reference: a DDP freed before backward never all-reduces
    launched = []

    def count_then_allreduce(state, bucket):
        launched.append(bucket.index())
        return default_hooks.allreduce_hook(state, bucket)  # DDP's own: divide, all-reduce

    ddp.register_comm_hook(None, count_then_allreduce)
    X, y = make_batch(LAYERS, batch_size, ctx.world_size, seed, 0)
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    F.mse_loss(ddp(X[rows].to(ctx.device)), y[rows].to(ctx.device)).backward()
    return {"pid": os.getpid(), "grad": flat_grad(model).cpu().numpy(),
            "allreduces": len(launched)}


def data_parallel_step(world_size: int, batch_size: int, seed: int) -> dict:
    """The whole batch through ``nn.DataParallel`` in this process (on every visible GPU, or
    none): its devices, whether its output is the bare module's, and its gradient."""
    model = make_model(LAYERS, seed)
    device = "cuda:0" if torch.cuda.is_available() else "cpu"  # DataParallel's first device
    model = model.to(device)
    dp = torch.nn.DataParallel(model)
    X, y = (t.to(device) for t in make_batch(LAYERS, batch_size, world_size, seed, 0))
    with torch.no_grad():
        same = bool(torch.equal(dp(X), model(X)))
    F.mse_loss(dp(X), y).backward()
    return {"device_ids": list(dp.device_ids), "output_is_module": same,
            "grad": flat_grad(model).cpu().numpy()}


@dataclasses.dataclass
class DataParallelVsDDP(Result):
    """One step of the same model and global batch under ``nn.DataParallel`` (in the caller)
    and DDP (``world_size`` ranks)."""

    world_size: int
    batch_size: int  # per rank; DataParallel takes the global batch at once
    caller_pid: int
    dp_device_ids: list  # [] without a GPU: DataParallel then just calls the module
    dp_output_is_module: bool
    dp_grad: np.ndarray
    ddp_pids: list
    ddp_grads: np.ndarray  # (world_size, n)
    ddp_allreduces: list  # bucket all-reduces per rank in the step

    json_extras = ("dp_processes", "ddp_processes", "max_grad_diff")

    @property
    def dp_processes(self) -> int:
        """DataParallel's processes: the caller alone, however many devices it uses."""
        return 1

    @property
    def ddp_processes(self) -> int:
        return len(set(self.ddp_pids))

    @property
    def max_grad_diff(self) -> float:
        """Largest |DDP's averaged gradient - DataParallel's| over ranks and entries."""
        return float(np.abs(self.ddp_grads - self.dp_grad).max())

    def json_fields(self) -> dict:
        data = super().json_fields()
        data.pop("dp_grad"), data.pop("ddp_grads")
        return data

    def describe(self) -> str:
        devices = (f"devices {self.dp_device_ids}" if self.dp_device_ids else
                   "no GPU: device_ids is [],\n  its forward just calls the module")
        return "\n".join([
            f"DataParallel: {self.dp_processes} process (the caller); {devices}:",
            f"  its output {'is' if self.dp_output_is_module else 'is not'} the bare module's",
            f"DDP: {self.ddp_processes} processes, one per rank, {self.batch_size} samples each",
            f"  bucket all-reduces in the step, per rank: {self.ddp_allreduces}",
            f"largest gradient difference, DDP vs DataParallel on the global batch of "
            f"{self.world_size * self.batch_size}:",
            f"  {self.max_grad_diff:.1e}"])


def run(world_size: int = 2, batch_size: int = 4, seed: int = 0,
        timeout: float = 60.0) -> DataParallelVsDDP:
    """One step under DataParallel here and under DDP on ``world_size`` ranks."""
    int_in_range("world_size", world_size, 1, ddplab.MAX_WORLD_SIZE)
    positive_int("batch_size", batch_size)
    an_int("seed", seed)
    dp = data_parallel_step(world_size, batch_size, seed)
    ranks = ddplab.run(ddp_step, world_size, timeout=timeout,
                       batch_size=batch_size, seed=seed)
    return DataParallelVsDDP.from_ranks(
        ranks,
        world_size=world_size, batch_size=batch_size, caller_pid=os.getpid(),
        dp_device_ids=dp["device_ids"], dp_output_is_module=dp["output_is_module"],
        dp_grad=dp["grad"], ddp_pids=[r["pid"] for r in ranks],
        ddp_grads=np.stack([r["grad"] for r in ranks]),
        ddp_allreduces=[r["allreduces"] for r in ranks])


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--batch-size", type=int, default=4, help="samples per rank")
    parser.add_argument("--seed", type=int, default=0)
