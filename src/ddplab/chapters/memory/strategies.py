"""Three ways to train one model on every rank, each with its optimizer:

- ``ddp``: ``DistributedDataParallel``, every rank holds everything;
- ``zero1``: DDP with ``torch.distributed.optim.ZeroRedundancyOptimizer``, each rank keeps the
  optimizer state of its own share of the parameters and broadcasts them after its step;
- ``fsdp``: FSDP2's ``fully_shard`` on every block (here each layer) and on the model:
  parameters, gradients and optimizer state sharded, parameters all-gathered for forward and
  backward, gradients reduce-scattered.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel as DDP

from ddplab.chapters.memory.accounting import SavedForBackward, record_bucket

STRATEGIES = ("ddp", "zero1", "fsdp")
OPTIMIZERS = ("sgd", "momentum", "adam")
LEARNING_RATE = 1e-3

# ---------------------------------------------------------------- the lines for your script


def zero1_optimizer(model, optimizer_class, **kwargs):
    """ZeRO stage 1: each rank keeps and steps the optimizer state of its own share of the
    parameters, then broadcasts them; use it where you built the optimizer, DDP unchanged."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optimizer_class,
                                   **kwargs)


def shard_with_fsdp(model, blocks, device_type: str, reshard_after_forward=None,
                    **fsdp_options):
    """FSDP2 (ZeRO stage 3) in place of DDP: each of ``blocks`` (your model's transformer
    blocks, e.g. ``model.layers``), then the whole model (what is left: embeddings, the head),
    becomes a unit whose parameters are sharded over the ranks; a block's parameters are
    all-gathered just before it runs and freed after. ``device_type``: ``"cuda"`` on GPUs.
    Build the optimizer after this, on ``model.parameters()``, the shards.
    ``reshard_after_forward``: left unset, torch's default frees each block's gathered
    parameters after its forward (the root's are kept); False keeps every unit's from forward
    to backward: ZeRO stage 2's memory during the step, one all-gather fewer. It is passed on
    only when set: torch takes ``None`` only from 2.8 (pytorch#155319), and raises a ValueError
    for it before. ``fsdp_options`` go to every ``fully_shard`` call (e.g.
    ``mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16)``)."""
    try:
        from torch.distributed.fsdp import fully_shard  # public from torch 2.6 (pytorch#141868)
    except ImportError:  # torch 2.4 and 2.5 keep it here
        from torch.distributed._composable.fsdp import fully_shard
    if reshard_after_forward is not None:
        fsdp_options["reshard_after_forward"] = reshard_after_forward
    mesh = init_device_mesh(device_type, (dist.get_world_size(),))
    for block in blocks:
        fully_shard(block, mesh=mesh, **fsdp_options)
    return fully_shard(model, mesh=mesh, **fsdp_options)


def linear_layers(model) -> list:
    """The chapter's model's blocks: each of its Linear layers (a model of equal layers)."""
    return [layer for layer in model if isinstance(layer, torch.nn.Linear)]


def optimizer_class(name: str):
    """The optimizer's class and its arguments."""
    if name == "sgd":
        return torch.optim.SGD, {"lr": LEARNING_RATE}
    if name == "momentum":
        return torch.optim.SGD, {"lr": LEARNING_RATE, "momentum": 0.9}
    return torch.optim.Adam, {"lr": LEARNING_RATE}


class Trained:
    """A model wrapped by one strategy: what to call, what to step, where DDP's buckets are.
    The model is moved to ``device`` first (in place, as ``Module.to`` does), wherever it was
    built."""

    def __init__(self, strategy, model, optimizer_name, bucket_view, world_size, device):
        cls, kwargs = optimizer_class(optimizer_name)
        model = model.to(device)  # DDP refuses a CPU module on an NCCL group, FSDP moves it
        self.model, self.buckets = model, {}
        if strategy == "fsdp":
            self.module = shard_with_fsdp(model, linear_layers(model), device.type)
            self.optimizer = self.local_optimizer = cls(model.parameters(), **kwargs)
            return
        self.module = DDP(model, gradient_as_bucket_view=bucket_view)
        self.module.register_comm_hook(self.buckets, record_bucket)
        if strategy == "zero1":
            self.optimizer = zero1_optimizer(model, cls, **kwargs)
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
