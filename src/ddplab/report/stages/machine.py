"""The report's first stage, the machine it was measured on: hosts, ranks per host, devices,
versions, NCCL's environment; and the memory one host has free, to refuse a model that cannot
fit before any rank trains it."""

from __future__ import annotations

import collections
import dataclasses
import os

import torch

import ddplab
from ddplab.chapters.memory import calculator
from ddplab.common import mlp
from ddplab.report.settings import ReportSettings
from ddplab.report.stage import Section, Stage, Table

GiB = 2 ** 30


def available_bytes(device) -> int | None:
    """Bytes free for this rank's host or GPU: ``torch.cuda.mem_get_info`` on a GPU, Linux's
    ``MemAvailable`` (/proc/meminfo) on a CPU; None where neither can be read."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def describe_rank(ctx) -> dict:
    """What this rank runs on (a rank function)."""
    device = ctx.device
    return {
        "rank": ctx.rank, "local_rank": ctx.local_rank, "host": ctx.host, "backend": ctx.backend,
        "device": str(device),
        "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                        else "CPU"),
        "device_memory_bytes": (torch.cuda.get_device_properties(device).total_memory
                                if device.type == "cuda" else None),
        "available_bytes": available_bytes(device),
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
    }


def nccl_version() -> str | None:
    if not torch.cuda.is_available():
        return None
    try:
        version = torch.cuda.nccl.version()  # (2, 28, 9[, suffix]): torch/cuda/nccl.py
    except (RuntimeError, AttributeError):  # a build without NCCL
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def describe(world_size: int, timeout: float = 60.0) -> dict:
    """Every rank's description, summed up: the report's ``machine`` section."""
    ranks = ddplab.run(describe_rank, world_size, timeout=timeout)
    per_host = collections.Counter(r["host"] for r in ranks)
    gpu_memory = [r["device_memory_bytes"] for r in ranks if r["device_memory_bytes"]]
    available = [r["available_bytes"] for r in ranks if r["available_bytes"] is not None]
    return {
        "world_size": len(ranks),
        "hosts": sorted(per_host),
        "ranks_per_host": dict(sorted(per_host.items())),
        "devices": sorted({r["device_name"] for r in ranks}),
        "device_memory": ({"value": min(gpu_memory), "unit": "bytes",
                           "what": "smallest GPU's total"} if gpu_memory else None),
        "available_memory": ({"value": min(available), "unit": "bytes",
                              "what": "least free on one host or GPU, before the report"}
                             if available else None),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl_version(),
        "backend": ranks.backend,
        "device": ranks.device,
        "nccl_env": ranks[0]["nccl_env"],
        "ranks": ranks,
    }


class NotEnoughMemory(ValueError):
    """The model asked for cannot fit in what the machine has free."""


@dataclasses.dataclass
class MachineSection(Section):
    @property
    def world_size(self) -> int:
        return self.data["world_size"]

    @property
    def nodes(self) -> int:
        return len(self.data["hosts"])


def measure(s: ReportSettings) -> MachineSection:
    section = MachineSection(describe(s.world_size, s.timeout))
    check_memory(s, section.data)
    return section


def bytes_needed_per_rank(s: ReportSettings) -> float:
    """The largest stage's bytes on one rank: the step stage holds the model twice (with and
    without DDP, ``step_time.paired``) with gradients and DDP's buckets, the memory stage one
    Adam model (the calculator's count); activations and buffers taken as the same again."""
    step = 5 * 4 * mlp.param_count(s.layers)
    adam = sum(calculator.bytes_per_rank(s.memory_params_millions * 1e6, "adam", "ddp",
                                         s.world_size).values())
    return 2 * max(step, adam)


def check_memory(s: ReportSettings, section: dict) -> None:
    free = section["available_memory"]
    if free is None:
        return
    per_host = max(section["ranks_per_host"].values())
    on_gpu = section["device_memory"] is not None  # a GPU per rank: its own memory
    need = bytes_needed_per_rank(s) * (1 if on_gpu else per_host)
    if need > free["value"]:
        where = "one GPU" if on_gpu else f"one host ({per_host} ranks)"
        raise NotEnoughMemory(
            f"too little memory: a model of {mlp.param_count(s.layers) / 1e6:,.1f} M parameters "
            f"needs about {need / 1e9:,.1f} GB on {where}, and {free['value'] / 1e9:,.1f} GB is "
            f"free; choose a smaller --params-millions")


def table(machine: dict) -> Table:
    return Table(("", ""), [
        ("hosts", ", ".join(machine["hosts"])),
        ("ranks per host", ", ".join(f"{h}: {n}" for h, n in machine["ranks_per_host"].items())),
        ("devices", ", ".join(machine["devices"])), ("backend", machine["backend"]),
        ("torch / CUDA / NCCL", f"{machine['torch']} / {machine['cuda']} / {machine['nccl']}"),
        ("NCCL_* variables", ", ".join(f"{k}={v}" for k, v in machine["nccl_env"].items())
         or "none set")])


STAGE = Stage(
    name="machine", key="machine", what="the machine", measure=measure,
    title="The machine", about="Where the ranks ran, and what sets NCCL's choices.",
    book="running.md", table=table)
