"""A sharded checkpoint loaded at another world size: saved by FSDP on 2 ranks, loaded on 3.

``dcp.save`` records, in its ``.metadata``, where every shard sits in the whole tensor, and
``dcp.load`` reads into whatever layout the state dict it fills has (a ``DTensor`` of the new
mesh): a load plans which pieces of which saved files each rank needs
(``torch/distributed/checkpoint/default_planner.py``), so the world size that loads need not
be the one that saved. What goes back is the model and the optimizer: here both are gathered
whole after the load and compared with what was saved, element for element, and the learning
rate, which lives in the optimizer's ``param_groups``, comes back with it.

Two runs of the pool, one per world size, share a folder on this machine: the first trains
``steps`` steps of Adam on 2 ranks and saves; the second builds the model from another seed on
3 ranks, loads, and returns the same whole tensors.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile

import numpy as np
import torch
import torch.distributed as dist

import ddplab
from ddplab.chapters.memory.sharded_checkpoint import (
    BATCH_SIZE,
    WIDTH,
    _step,
    _trained,
    _whole,
    load_sharded,
    save_sharded,
)
from ddplab.common.checks import int_in_range, positive_int
from ddplab.common.results import Result
from ddplab.engine.placement import require

DECAY = 0.5  # the saving run's learning rate is scaled by this before it saves


def _whole_optimizer(model, optimizer) -> torch.Tensor:
    """Every entry of the optimizer's state (Adam's step, exp_avg, exp_avg_sq), gathered
    whole on every rank, by parameter name, flattened, on the host."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
    )

    state = get_optimizer_state_dict(model, optimizer,
                                     options=StateDictOptions(full_state_dict=True))["state"]
    return torch.cat([torch.as_tensor(state[name][key]).detach().flatten().float().cpu()
                      for name in sorted(state) for key in sorted(state[name])])


# ---------------------------------------------------------------- on every rank


def train_and_save(ctx, path: str, steps: int, seed: int) -> dict:
    """``steps`` steps of Adam on this world size's shards of one global batch, then save."""
    generator = torch.Generator().manual_seed(seed + 1)
    rows = BATCH_SIZE * 6  # divides by 2 and by 3
    model, optimizer = _trained(ctx, "fsdp", seed)
    for _ in range(steps):
        X, y = torch.randn(rows, WIDTH, generator=generator), torch.randn(rows, 1,
                                                                         generator=generator)
        mine = slice(ctx.rank * rows // ctx.world_size, (ctx.rank + 1) * rows // ctx.world_size)
        _step(model, optimizer, (X[mine].to(ctx.device), y[mine].to(ctx.device)))
    for group in optimizer.param_groups:
        group["lr"] *= DECAY  # as a scheduler would have set it by now
    save_sharded(model, optimizer, path)
    dist.barrier()
    return {"model": _whole(model).cpu().numpy(),
            "optimizer": _whole_optimizer(model, optimizer).cpu().numpy(),
            "lr": optimizer.param_groups[0]["lr"]}


def load_only(ctx, path: str, seed: int) -> dict:
    """A model from another seed, sharded over this world size, loaded from ``path``."""
    model, optimizer = _trained(ctx, "fsdp", seed + 100)
    before = _whole(model).cpu().numpy()
    load_sharded(model, optimizer, path)
    return {"before": before, "model": _whole(model).cpu().numpy(),
            "optimizer": _whole_optimizer(model, optimizer).cpu().numpy(),
            "lr": optimizer.param_groups[0]["lr"]}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class ResizedResume(Result):
    saved_world_size: int
    loaded_world_size: int
    steps: int
    parameters: int  # entries of the model
    optimizer_entries: int  # entries of Adam's state
    max_model_diff_per_rank: list[float]  # loaded against saved, whole, per loading rank
    max_optimizer_diff_per_rank: list[float]
    fresh_diff: float  # the loading model before its load, against the saved one
    lr_saved: float  # the learning rate in the optimizer's param_groups when saved
    lr_loaded_per_rank: list[float]  # and on each loading rank after the load

    def describe(self) -> str:
        return (f"FSDP: saved on {self.saved_world_size} ranks after {self.steps} steps of "
                f"Adam, loaded on {self.loaded_world_size}\n"
                f"  model, {self.parameters} entries: largest difference "
                f"{max(self.max_model_diff_per_rank):.1e} (before loading: "
                f"{self.fresh_diff:.1e})\n"
                f"  Adam's state, {self.optimizer_entries} entries: largest difference "
                f"{max(self.max_optimizer_diff_per_rank):.1e}\n"
                f"  learning rate: saved {self.lr_saved:g}, loaded {self.lr_loaded_per_rank}")


def run(saved_world_size: int = 2, loaded_world_size: int = 3, steps: int = 2,
        seed: int = 0) -> ResizedResume:
    int_in_range("saved_world_size", saved_world_size, 1, 64)
    int_in_range("loaded_world_size", loaded_world_size, 1, 64)
    positive_int("steps", steps)
    for size in (saved_world_size, loaded_world_size):
        if (BATCH_SIZE * 6) % size:
            raise ValueError(f"world sizes must divide the global batch ({BATCH_SIZE * 6} "
                             f"rows), got {size}")
    require("fsdp", ddplab.placement())
    folder = tempfile.mkdtemp(prefix="ddplab-resized-")
    try:
        saved = ddplab.run(train_and_save, saved_world_size, path=folder, steps=steps,
                           seed=seed)
        loaded = ddplab.run(load_only, loaded_world_size, path=folder, seed=seed)
    finally:
        shutil.rmtree(folder)
    model, optimizer = saved[0]["model"], saved[0]["optimizer"]
    return ResizedResume.from_ranks(
        [saved, loaded], saved_world_size, loaded_world_size, steps, len(model),
        len(optimizer),
        [float(np.abs(r["model"] - model).max()) for r in loaded],
        [float(np.abs(r["optimizer"] - optimizer).max()) for r in loaded],
        float(np.abs(loaded[0]["before"] - model).max()), saved[0]["lr"],
        [r["lr"] for r in loaded])
