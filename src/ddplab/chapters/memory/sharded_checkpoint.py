"""Checkpoints of a sharded run: save, load, and go on exactly where it stopped.

Under ZeRO-1 no rank holds the whole optimizer state, and under FSDP no rank holds a whole
parameter either, so ``torch.save(model.state_dict())`` on rank 0, the DDP way, saves a part:

- **FSDP2**: ``torch.distributed.checkpoint`` (DCP). ``get_state_dict(model, optimizer)``
  (``torch/distributed/checkpoint/state_dict.py``) gives the model's and the optimizer's state
  keyed by parameter name, each value this rank's shard (a ``DTensor``); ``dcp.save`` writes
  every rank's shards into one folder, a file per rank and a ``.metadata`` file, and
  ``dcp.load`` reads into a state dict of the same layout, in place, whatever the world size
  that saved it; ``set_state_dict`` puts it back. The PyTorch FSDP2 tutorial does the same.
- **ZeRO-1**: ``ZeroRedundancyOptimizer.consolidate_state_dict(to=0)`` on every rank sends each
  rank's share of the state to rank 0 (a broadcast per rank,
  ``torch/distributed/optim/zero_redundancy_optimizer.py``), whose ``state_dict()`` is then the
  whole optimizer's; rank 0 saves it beside the module's. ``load_state_dict`` on every rank
  keeps the state of the parameters that rank owns and drops the rest.

The run, on every rank: a small block-structured model (``BlockModel``: a transformer's
blocks without attention) trains ``steps`` steps on each rank's share of a batch, is saved,
then takes one more step. A second model, built from another seed, is loaded from the files
and takes the same step: its parameters must equal the first's exactly (the optimizer state
came back too: Adam's step depends on it), and without the load they differ.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.chapters.memory.strategies import shard_with_fsdp, zero1_optimizer
from ddplab.common.checks import int_in_range, one_of, positive_int
from ddplab.common.results import Result
from ddplab.engine.placement import require

STRATEGIES = ("fsdp", "zero1")
WIDTH, DEPTH, BATCH_SIZE, LR = 16, 3, 4, 1e-2


class Block(torch.nn.Module):
    """A transformer block's shape without its attention: norm, MLP, residual."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class BlockModel(torch.nn.Module):
    """Blocks, then a head: FSDP shards each block as a unit (``model.blocks``)."""

    def __init__(self, width: int, depth: int):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))
        self.head = torch.nn.Linear(width, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


# ---------------------------------------------------------------- the lines for your script


def save_sharded(model, optimizer, path: str) -> None:
    """FSDP: every rank writes its own shards of the model and of the optimizer into the
    folder ``path`` (on a file system every rank sees)."""
    import torch.distributed.checkpoint as dcp  # imported here: it takes seconds
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)


def load_sharded(model, optimizer, path: str) -> None:
    """FSDP: after ``shard_with_fsdp`` and building the optimizer, on every rank."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)  # the layout to fill
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=path)  # in place
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"])


def save_zero1(ddp, optimizer, path: str) -> None:
    """ZeRO-1: rank 0 gathers every rank's optimizer state, then saves it with the model."""
    optimizer.consolidate_state_dict(to=0)  # on every rank: each sends its share to rank 0
    if dist.get_rank() == 0:
        torch.save({"model": ddp.module.state_dict(), "optimizer": optimizer.state_dict()},
                   path)
    dist.barrier()  # no rank reads before rank 0 has written


def load_zero1(ddp, optimizer, path: str, device) -> None:
    """ZeRO-1, on every rank: each keeps the optimizer state of the parameters it owns."""
    state = torch.load(path, map_location=device)
    ddp.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])


# ---------------------------------------------------------------- on every rank


def _trained(ctx, strategy: str, seed: int):
    torch.manual_seed(seed)
    model = BlockModel(WIDTH, DEPTH).to(ctx.device)
    if strategy == "fsdp":
        shard_with_fsdp(model, model.blocks, ctx.device.type)
        return model, torch.optim.Adam(model.parameters(), lr=LR)
    ddp = DDP(model)
    return ddp, zero1_optimizer(ddp, torch.optim.Adam, lr=LR)


def _step(model, optimizer, batch) -> None:
    optimizer.zero_grad()
    F.mse_loss(model(batch[0]), batch[1]).backward()
    optimizer.step()


def _whole(model) -> torch.Tensor:
    """Every parameter, whole (FSDP all-gathers its shards), flattened, on the host."""
    return torch.cat([(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().flatten()
                      for p in model.parameters()]).cpu()


def round_trip(ctx, strategy: str, steps: int, seed: int) -> dict:
    folder = [tempfile.mkdtemp(prefix="ddplab-checkpoint-") if ctx.rank == 0 else None]
    dist.broadcast_object_list(folder, src=0)  # one folder, rank 0's, on this machine
    path = os.path.join(folder[0], "checkpoint" if strategy == "fsdp" else "checkpoint.pt")
    generator = torch.Generator().manual_seed(seed + 1)
    batches = [(torch.randn(BATCH_SIZE * ctx.world_size, WIDTH, generator=generator),
                torch.randn(BATCH_SIZE * ctx.world_size, 1, generator=generator))
               for _ in range(steps + 1)]
    rows = slice(ctx.rank * BATCH_SIZE, (ctx.rank + 1) * BATCH_SIZE)
    batches = [(X[rows].to(ctx.device), y[rows].to(ctx.device)) for X, y in batches]
    model, optimizer = _trained(ctx, strategy, seed)
    for batch in batches[:steps]:
        _step(model, optimizer, batch)
    (save_sharded if strategy == "fsdp" else save_zero1)(model, optimizer, path)
    dist.barrier()
    files = sorted(os.listdir(path)) if strategy == "fsdp" else [os.path.basename(path)]
    _step(model, optimizer, batches[steps])
    went_on = _whole(model)
    fresh, fresh_optimizer = _trained(ctx, strategy, seed + 100)
    unloaded = _whole(fresh)
    if strategy == "fsdp":
        load_sharded(fresh, fresh_optimizer, path)
    else:
        load_zero1(fresh, fresh_optimizer, path, ctx.device)
    _step(fresh, fresh_optimizer, batches[steps])
    dist.barrier()
    if ctx.rank == 0:
        shutil.rmtree(folder[0])
    return {"files": files, "max_diff": float((_whole(fresh) - went_on).abs().max()),
            "fresh_diff": float((unloaded - went_on).abs().max())}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class RoundTrip(Result):
    strategy: str
    world_size: int
    steps: int
    files: list[str]  # what the checkpoint holds on disk
    max_diff_per_rank: list[float]  # |loaded model's step - saved model's step|, per rank
    fresh_diff: float  # the second model before loading, against the first: not a copy

    def describe(self) -> str:
        return (f"{self.strategy} on {self.world_size} ranks: {self.steps} steps, saved as "
                f"{', '.join(self.files)}\n  one more step, loaded against went on: largest "
                f"difference {max(self.max_diff_per_rank):.1e} (before loading: "
                f"{self.fresh_diff:.1e})")


def run(world_size: int = 2, strategy: str = "fsdp", steps: int = 2,
        seed: int = 0) -> RoundTrip:
    world_size = int_in_range("world_size", world_size, 1, 64)
    strategy = one_of("strategy", strategy, STRATEGIES)
    steps = positive_int("steps", steps)
    require(strategy, ddplab.placement())  # what does not run there, refused
    per_rank = ddplab.run(round_trip, world_size, strategy=strategy, steps=steps, seed=seed)
    return RoundTrip.from_ranks(per_rank, strategy, world_size, steps, per_rank[0]["files"],
                                [r["max_diff"] for r in per_rank],
                                max(r["fresh_diff"] for r in per_rank))
