"""Where ``fp16_compress_hook`` overflows: it casts a bucket to float16 *before* dividing it.

torch 2.13, torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py, ``_compress_hook``
(line 71): ``compressed_tensor = buffer.to(dtype).div_(world_size)``. float16's largest finite
number is 65504, so a gradient entry above it becomes ``inf`` in the cast, and stays ``inf``
after the division and the all-reduce, though the average itself would fit. Every rank here
trains ``nn.Linear(2, 1, bias=False)`` on the input ``[value, 1]``: its weight's gradient is
``[value, 1]`` on every rank, so the exact average is ``[value, 1]``.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.results import Result


def averaged_gradient(ctx, value: float, hook: bool) -> list[float]:
    """The weight's gradient after DDP's all-reduce, with or without the fp16 hook."""
    model = nn.Linear(2, 1, bias=False).to(ctx.device)
    ddp = DDP(model)
    if hook:
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    ddp(torch.tensor([[value, 1.0]], device=ctx.device)).sum().backward()
    return model.weight.grad.flatten().tolist()


@dataclasses.dataclass
class Overflow(Result):
    """The averaged gradient's first entry without the hook and with it."""

    value: float
    world_size: int
    exact: float
    fp16_hook: float

    def describe(self) -> str:
        return (f"gradient entry {self.value:,.0f} on each of {self.world_size} ranks;\n"
                f"  average without a hook: {self.exact:,.0f}; with fp16_compress_hook: "
                f"{self.fp16_hook}")


def run(value: float = 70000.0, world_size: int = 2, timeout: float = 60.0) -> Overflow:
    """All-reduce a gradient entry of ``value`` with and without ``fp16_compress_hook``."""
    exact = ddplab.run(averaged_gradient, world_size, timeout=timeout,
                       value=value, hook=False)
    hooked = ddplab.run(averaged_gradient, world_size, timeout=timeout,
                        value=value, hook=True)
    return Overflow.from_ranks((exact, hooked), value, world_size, exact[0][0], hooked[0][0])
