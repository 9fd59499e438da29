"""The environment variables that matter on a cluster, each with the place in the installed
torch that sets or reads it: ``(file under torch/, line)``. The running page's table cites these;
``lines_hold_their_names`` checks that each line still names its variable, so a torch release
that moves one is noticed where the book is built.

Variables that NCCL reads itself (``NCCL_SOCKET_IFNAME``, ``NCCL_IB_HCA``, ``NCCL_IB_DISABLE``,
``NCCL_DEBUG``) are not read by torch: the line given is where DDP lists them among the
variables it logs (``_dump_DDP_relevant_env_vars``). Where torch reads a variable in C++ whose
source the wheel does not ship, the line is in the header the wheel ships under
``torch/include``.
"""

from __future__ import annotations

import pathlib

AGENT = "distributed/elastic/agent/server/local_elastic_agent.py"
DDP = "nn/parallel/distributed.py"
NCCL = "include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp"

SOURCES = {
    "RANK": (AGENT, 416),
    "GROUP_RANK": (AGENT, 417),
    "LOCAL_WORLD_SIZE": (AGENT, 420),
    "WORLD_SIZE": (AGENT, 421),
    "MASTER_ADDR": (AGENT, 424),
    "MASTER_PORT": (AGENT, 425),
    "TORCHELASTIC_RUN_ID": (AGENT, 428),
    "LOCAL_RANK": (AGENT, 512),
    "OMP_NUM_THREADS": ("distributed/run.py", 872),
    "GLOO_SOCKET_IFNAME": (DDP, 312),
    "NCCL_SOCKET_IFNAME": (DDP, 314),
    "NCCL_DEBUG": (DDP, 316),
    "NCCL_IB_DISABLE": (DDP, 318),
    "NCCL_IB_HCA": (DDP, 333),
    "TORCH_DISTRIBUTED_DEBUG": ("distributed/__init__.py", 170),
    "TORCH_FR_BUFFER_SIZE": ("include/torch/csrc/distributed/c10d/FlightRecorder.hpp", 111),
    "TORCH_NCCL_TRACE_BUFFER_SIZE": (NCCL, 116),
    "TORCH_NCCL_DUMP_ON_TIMEOUT": (NCCL, 75),
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": (NCCL, 68),
    "TORCH_NCCL_BLOCKING_WAIT": (NCCL, 61),
    "TORCH_NCCL_ENABLE_MONITORING": (NCCL, 102),
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": (NCCL, 107),
}
# Read by a function whose name, not the variable's, stands on the line cited.
CALLS = {"TORCH_DISTRIBUTED_DEBUG": "set_debug_level_from_env()",
         "LOCAL_RANK": "worker_env[\"LOCAL_RANK\"]"}


def line(path: str, number: int) -> str:
    """Line ``number`` (from 1) of ``path`` under the installed torch."""
    import torch

    return (pathlib.Path(torch.__file__).parent / path).read_text().splitlines()[number - 1]


def lines_not_holding_their_names() -> list[str]:
    """Each variable whose cited line no longer names it (or the call that reads it), with
    the line: empty when every citation holds."""
    wrong = []
    for name, (path, number) in SOURCES.items():
        text = line(path, number)
        if f'"{name}"' not in text and CALLS.get(name, "\0") not in text:
            wrong.append(f"{name}: {path}:{number}: {text.strip()}")
    return wrong
