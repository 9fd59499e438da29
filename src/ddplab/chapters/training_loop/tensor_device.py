"""A CPU tensor in a collective on an NCCL group: "No backend type associated with device
type cpu".

``init_process_group("nccl")`` forms a group with one backend, for CUDA tensors only
(``BackendConfig`` in ``torch/distributed/distributed_c10d.py``: a single backend name maps to
the devices of ``Backend.backend_capability``, ``["cuda"]`` for NCCL). A collective looks the
tensor's device type up in that map, and a tensor made without ``device=`` (a loss turned into
``torch.tensor(loss.item())``, a count, a metric) is a CPU tensor, for which the group has no
backend. The same map, with no entry for ``cpu``, is had on this machine from
``new_group(backend="cuda:gloo")`` (gloo serving CUDA tensors only), so the error is run here
for real. The fixes: make the tensor on the rank's device (``all_reduce_mean``), or give the
group a backend for each device type, ``init_process_group("cpu:gloo,cuda:nccl")``, run here as
``"cpu:gloo,cuda:gloo"``.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist

import ddplab
from ddplab.common.checks import int_in_range, one_of
from ddplab.common.results import Result

# The group each run forms: a backend for CUDA tensors only (as "nccl" gives), or one per device.
GROUPS = {"cuda-only": "cuda:gloo", "per-device": "cpu:gloo,cuda:gloo"}


def all_reduce_mean(value: float, device: torch.device, group=None) -> float:
    """The mean over the ranks of one number: the tensor is made on the rank's own device
    (``cuda:local_rank`` under NCCL), and ``.item()`` brings the result back to the host."""
    total = torch.tensor([value], device=device)  # no device=: a CPU tensor, refused by NCCL
    dist.all_reduce(total, group=group)
    return total.item() / dist.get_world_size(group)


def mean_on_group(ctx, group_backend: str) -> dict:
    group = dist.new_group(backend=group_backend)
    # Every rank has formed it before any tears it down: gloo's connectFullMesh may return on
    # one rank while its peer still completes the pair, and a rank that fails the all-reduce
    # at once (no CPU backend) and destroys the group closed that pair under it ("Connection
    # closed by peer" on the peer, seen once under load).
    dist.barrier()
    try:
        # A CPU tensor, as torch.tensor(...) without device= makes it under NCCL too.
        return {"mean": all_reduce_mean(float(ctx.rank), torch.device("cpu"), group),
                "error": None}
    except RuntimeError as exc:
        return {"mean": None, "error": str(exc)}
    finally:
        dist.destroy_process_group(group)  # subgroups must not outlive the call


@dataclasses.dataclass
class TensorDevice(Result):
    """A CPU tensor all-reduced on a group with or without a backend for CPU tensors."""

    world_size: int
    group: str
    group_backend: str
    mean_per_rank: list[float | None]
    error_per_rank: list[str | None]

    def describe(self) -> str:
        head = f"a CPU tensor all-reduced on new_group(backend={self.group_backend!r}): "
        if self.error_per_rank[0] is not None:
            return head + f"\n  RuntimeError: {self.error_per_rank[0]}"
        return head + f"\n  mean of the ranks' numbers on every rank: {self.mean_per_rank}"


def run(world_size: int = 2, group: str = "cuda-only") -> TensorDevice:
    world_size = int_in_range("world_size", world_size, 1, 8)
    group = one_of("group", group, tuple(GROUPS))
    per_rank = ddplab.run(mean_on_group, world_size=world_size, group_backend=GROUPS[group])
    return TensorDevice.from_ranks(per_rank, world_size, group, GROUPS[group],
                                   [r["mean"] for r in per_rank],
                                   [r["error"] for r in per_rank])
