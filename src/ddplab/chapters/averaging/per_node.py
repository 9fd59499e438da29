"""Does DDP average over the GPUs of one node, or over every rank of every node?

The ranks are laid out as ``nodes`` x ``gpus_per_node``; each node all-reduces over a subgroup
of its own ranks, and DDP's gradient is set beside those per-node averages and beside the plain
sum over all ranks.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.chapters.averaging.averaging import LAYERS, make_data, reference_gradient
from ddplab.common.checks import positive_int
from ddplab.common.mlp import flat_grad, make_model
from ddplab.common.results import Result

# The per-node subgroups this rank process has formed, by (default group, gpus_per_node).
# Forming them (a rendezvous through the store, then a connection to every peer of the node)
# took about as long as the rest of a call at 8 ranks on 2 cores, and a lab's sliders come back
# to the same layouts; so they are kept, like the pool's own groups (engine/groups.py), for the
# process's life, one set per layout. A default group's name is never reused (groups.SPAN), so
# a key never finds the subgroups of a group that is gone.
_NODE_GROUPS: dict = {}


def node_groups(world_size: int, gpus_per_node: int) -> list:
    """One subgroup per node: ranks ``n * gpus_per_node`` to ``(n + 1) * gpus_per_node - 1``."""
    key = (dist.group.WORLD.group_name, gpus_per_node)
    if key not in _NODE_GROUPS:  # every rank has run the same calls: all miss, or none
        # Every rank must create every subgroup, in the same order.
        _NODE_GROUPS[key] = [
            dist.new_group(list(range(n * gpus_per_node, (n + 1) * gpus_per_node)))
            for n in range(world_size // gpus_per_node)]
    return _NODE_GROUPS[key]


def node_gradients(ctx, gpus_per_node: int, batch_size: int, seed: int) -> dict:
    """DDP's gradient next to the average over this rank's node only (a subgroup per node)."""
    node = ctx.rank // gpus_per_node
    X_all, y_all = make_data(seed, ctx.world_size * batch_size)
    X = X_all[ctx.rank * batch_size:(ctx.rank + 1) * batch_size].to(ctx.device)
    y = y_all[ctx.rank * batch_size:(ctx.rank + 1) * batch_size].to(ctx.device)

    model = make_model(LAYERS, seed, activation=torch.nn.Tanh).to(ctx.device)
    F.mse_loss(model(X), y).backward()  # no DDP yet: this rank's own gradient
    local_grad = flat_grad(model)
    node_average = local_grad.clone()
    dist.all_reduce(node_average, group=node_groups(ctx.world_size, gpus_per_node)[node])
    node_average /= gpus_per_node

    model.zero_grad(set_to_none=True)
    ddp = DDP(model)  # keep a reference: a DDP freed before backward never all-reduces
    F.mse_loss(ddp(X), y).backward()
    return {"node": node, "local_rank": ctx.rank % gpus_per_node, "local": local_grad,
            "node_average": node_average, "ddp": flat_grad(model)}


@dataclasses.dataclass
class NodeAveraging(Result):
    """DDP's gradient against per-node averages, for nodes x GPUs per node ranks."""

    nodes: int
    gpus_per_node: int
    batch_size: int
    node_of_rank: list[int]
    local_rank_of_rank: list[int]
    local_grads: np.ndarray  # (world_size, n)
    node_averages: np.ndarray  # (nodes, n): mean over the ranks of each node only
    ddp_grad: np.ndarray  # (n,): the same on every rank
    summed_grad: np.ndarray  # (n,): the sum of the ranks' local gradients
    reference_grad: np.ndarray  # (n,)

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def divisor(self) -> float:
        """What DDP divided the summed gradient by (least squares over all elements)."""
        return float(self.summed_grad @ self.ddp_grad / (self.ddp_grad @ self.ddp_grad))


def node_average(nodes: int = 2, gpus_per_node: int = 4, batch_size: int = 8, seed: int = 0,
                 timeout: float = 60.0) -> NodeAveraging:
    """Lay ``nodes * gpus_per_node`` ranks out as nodes; compare DDP with per-node averages."""
    for name, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node),
                        ("batch_size", batch_size)):
        positive_int(name, value)
    results = ddplab.run(node_gradients, world_size_of(nodes, gpus_per_node), timeout=timeout,
                         gpus_per_node=gpus_per_node, batch_size=batch_size,
                         seed=seed)
    ddp = np.stack([r["ddp"] for r in results])
    if not np.allclose(ddp, ddp[0]):  # DDP keeps every replica identical; say so if not
        raise AssertionError("DDP's gradients differ between ranks")
    return NodeAveraging.from_ranks(
        results,
        nodes=nodes, gpus_per_node=gpus_per_node, batch_size=batch_size,
        node_of_rank=[r["node"] for r in results],
        local_rank_of_rank=[r["local_rank"] for r in results],
        local_grads=np.stack([r["local"] for r in results]),
        node_averages=np.stack([results[n * gpus_per_node]["node_average"]
                                for n in range(nodes)]),
        # The plain sum over all ranks, added here from what each rank returned: an all-reduce
        # SUM more in every rank would give the same numbers, for a collective's time more.
        ddp_grad=ddp[0], summed_grad=np.stack([r["local"] for r in results]).sum(axis=0),
        reference_grad=reference_gradient([batch_size] * nodes * gpus_per_node, "mean", seed),
    )


def world_size_of(nodes: int = 2, gpus_per_node: int = 4, **_) -> int:
    """The ranks :func:`node_average` asks for: a panel reads it to stay within what its
    placement serves (``screen.widgets.ranks_of``)."""
    return nodes * gpus_per_node


node_average.world_size_of = world_size_of
