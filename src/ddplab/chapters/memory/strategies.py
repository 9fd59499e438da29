"""Three ways to train one model on every rank, each with its optimizer:

- ``ddp``: ``DistributedDataParallel``, every rank holds everything;
- ``zero1``: DDP with ``torch.distributed.optim.ZeroRedundancyOptimizer``, each rank keeps the
  optimizer state of its own share of the parameters and broadcasts them after its step;
- ``fsdp``: FSDP2's ``fully_shard`` on every layer and on the model: parameters, gradients and
  optimizer state sharded, parameters all-gathered for forward and backward, gradients
  reduce-scattered.
"""

from __future__ import annotations

import importlib

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from ddplab.chapters.memory.accounting import SavedForBackward, record_bucket

STRATEGIES = ("ddp", "zero1", "fsdp")
OPTIMIZERS = ("sgd", "momentum", "adam")
LEARNING_RATE = 1e-3

# FSDP2's fully_shard is public in torch.distributed.fsdp from torch 2.6 (pytorch#141868, which
# moved it there); earlier versions keep it in torch.distributed._composable.fsdp.
_FULLY_SHARD_HOMES = ("torch.distributed.fsdp", "torch.distributed._composable.fsdp")


def fully_shard_function():
    """FSDP2's ``fully_shard`` from where this torch keeps it, or a clear error."""
    for home in _FULLY_SHARD_HOMES:
        try:
            return importlib.import_module(home).fully_shard
        except (ImportError, AttributeError):
            continue
    raise RuntimeError(f"torch {torch.__version__} has no FSDP2 fully_shard (looked in "
                       f"{', '.join(_FULLY_SHARD_HOMES)}); the fsdp strategy needs FSDP2")


def optimizer_class(name: str):
    """The optimizer's class and its arguments."""
    if name == "sgd":
        return torch.optim.SGD, {"lr": LEARNING_RATE}
    if name == "momentum":
        return torch.optim.SGD, {"lr": LEARNING_RATE, "momentum": 0.9}
    return torch.optim.Adam, {"lr": LEARNING_RATE}


class Trained:
    """A model wrapped by one strategy: what to call, what to step, where DDP's buckets are."""

    def __init__(self, strategy, model, optimizer_name, bucket_view, world_size, device):
        cls, kwargs = optimizer_class(optimizer_name)
        self.model, self.buckets = model, {}
        if strategy == "fsdp":
            from torch.distributed.device_mesh import init_device_mesh

            fully_shard = fully_shard_function()
            mesh = init_device_mesh(device.type, (world_size,))
            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer, mesh=mesh)
            self.module = fully_shard(model, mesh=mesh)
            self.optimizer = self.local_optimizer = cls(model.parameters(), **kwargs)
            return
        self.module = DDP(model, gradient_as_bucket_view=bucket_view)
        self.module.register_comm_hook(self.buckets, record_bucket)
        if strategy == "zero1":
            from torch.distributed.optim import ZeroRedundancyOptimizer

            self.optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=cls,
                                                     **kwargs)
            self.local_optimizer = self.optimizer.optim  # this rank's share only
        else:
            self.optimizer = self.local_optimizer = cls(model.parameters(), **kwargs)

    def step(self, X, y) -> None:
        """One step; ``activation_bytes``: what its forward kept for backward."""
        self.optimizer.zero_grad(set_to_none=False)
        with SavedForBackward(self.model) as saved:
            loss = torch.nn.functional.mse_loss(self.module(X), y)
        loss.backward()
        self.optimizer.step()
        self.activation_bytes = saved.bytes

    def bucket_buffers(self) -> list[torch.Tensor]:
        return list(self.buckets.values())

    def full_parameters(self) -> torch.Tensor:
        """Every parameter, whole, flattened, on the host (FSDP all-gathers its shards on the
        rank's device; numpy reads only host memory)."""
        return torch.cat([(p.full_tensor() if hasattr(p, "full_tensor") else p).detach()
                          .flatten() for p in self.model.parameters()]).cpu()
