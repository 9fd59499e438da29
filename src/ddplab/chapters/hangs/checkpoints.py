"""Checkpoints under DDP: save once, on rank 0, the plain module's state; every rank waits for
the file, then loads it onto its own device.

- ``ddp.module.state_dict()`` has the model's own keys (``0.weight``); ``ddp.state_dict()``
  has each one prefixed with ``module.``, since DDP holds the model as its attribute
  ``module``. The prefixed one does not load into a plain model (``load_state_dict`` is strict:
  every key is missing and every key unexpected); ``torch.nn.modules.utils.
  consume_prefix_in_state_dict_if_present(state, "module.")`` strips it in place.
- Only rank 0 writes: every rank holds the same parameters after a DDP step, and W writers of
  one file race. ``dist.barrier()`` keeps the other ranks from reading before it is written.
- ``map_location`` puts the tensors on the loading rank's device; without it they go back to
  the device they were saved from (every rank's GPU would be rank 0's).

Files go to a temporary directory the driver creates and removes.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import textwrap

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common.checks import an_int, int_in_range
from ddplab.common.mlp import make_batch, make_model
from ddplab.common.results import Result

LAYERS = (8, 16, 1)


def _params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


# ---------------------------------------------------------------- on every rank


def save_checkpoint(ddp, path: str, rank: int) -> None:
    """Rank 0 writes the plain module's state; every rank waits for the file."""
    if rank == 0:
        torch.save(ddp.module.state_dict(), path)  # not ddp.state_dict()
    dist.barrier()  # no rank reads before rank 0 has written


def load_checkpoint(model, path: str, device) -> None:
    """Into a plain model, onto this rank's own device."""
    model.load_state_dict(torch.load(path, map_location=device))


def save_and_load(ctx, directory: str, seed: int) -> dict:
    """One DDP step; save and load as :func:`save_checkpoint` does, then the
    same with ``ddp.state_dict()``, which a plain model refuses."""
    model = make_model(LAYERS, seed).to(ctx.device)
    ddp = DDP(model)
    X, y = (t[ctx.rank * 4:(ctx.rank + 1) * 4].to(ctx.device)
            for t in make_batch(LAYERS, 4, ctx.world_size, seed, 0))
    F.mse_loss(ddp(X), y).backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    plain_path = os.path.join(directory, "model.pt")
    wrapped_path = os.path.join(directory, "ddp.pt")
    save_checkpoint(ddp, plain_path, ctx.rank)
    fresh = make_model(LAYERS, seed + 1).to(ctx.device)
    load_checkpoint(fresh, plain_path, ctx.device)
    loaded_diff = (_params(fresh) - _params(model)).abs().max().item()

    if ctx.rank == 0:  # the other candidate, with every key prefixed "module."
        torch.save(ddp.state_dict(), wrapped_path)
    dist.barrier()
    wrapped = torch.load(wrapped_path, map_location=ctx.device)
    keys = list(wrapped)
    try:
        make_model(LAYERS, seed + 1).to(ctx.device).load_state_dict(wrapped)
        prefix_error = None
    except RuntimeError as exc:
        prefix_error = str(exc)
    consume_prefix_in_state_dict_if_present(wrapped, "module.")
    stripped = make_model(LAYERS, seed + 1).to(ctx.device)
    stripped.load_state_dict(wrapped)
    stripped_diff = (_params(stripped) - _params(model)).abs().max().item()
    return {"plain_keys": list(ddp.module.state_dict()), "ddp_keys": keys,
            "loaded_diff": loaded_diff, "prefix_error": prefix_error,
            "stripped_diff": stripped_diff,
            "files": sorted(os.listdir(directory))}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class Checkpoints(Result):
    world_size: int
    plain_keys: list[str]  # ddp.module.state_dict()
    ddp_keys: list[str]  # ddp.state_dict()
    files: list[str]  # what rank 0 wrote
    max_diff_loaded: float  # |loaded - trained|, every rank, from ddp.module.state_dict()
    prefix_error: str | None  # ddp.state_dict() into a plain model, as rank 0 saw it
    max_diff_stripped: float  # the same after consume_prefix_in_state_dict_if_present
    directory_removed: bool

    def describe(self) -> str:
        error = (self.prefix_error or "none").splitlines()
        return "\n".join(textwrap.fill(line, 78, subsequent_indent="  ") for line in [
            f"ddp.module.state_dict() keys: {self.plain_keys}",
            f"ddp.state_dict() keys: {self.ddp_keys}",
            f"loaded on every rank from ddp.module.state_dict(): largest difference "
            f"{self.max_diff_loaded:.1e}",
            "ddp.state_dict() into a plain model: " + " ".join(e.strip() for e in error),
            f"after stripping 'module.': largest difference {self.max_diff_stripped:.1e}",
            f"temporary directory removed: {self.directory_removed}"])


def run(world_size: int = 2, seed: int = 0, timeout: float = 60.0) -> Checkpoints:
    int_in_range("world_size", world_size, 1, ddplab.MAX_WORLD_SIZE)
    an_int("seed", seed)
    with tempfile.TemporaryDirectory(prefix="ddplab-checkpoint-") as directory:
        results = ddplab.run(save_and_load, world_size, timeout=timeout,
                             directory=directory, seed=seed)
    first = results[0]
    return Checkpoints.from_ranks(
        results,
        world_size=world_size, plain_keys=first["plain_keys"], ddp_keys=first["ddp_keys"],
        files=first["files"], max_diff_loaded=max(r["loaded_diff"] for r in results),
        prefix_error=first["prefix_error"],
        max_diff_stripped=max(r["stripped_diff"] for r in results),
        directory_removed=not os.path.exists(directory))
