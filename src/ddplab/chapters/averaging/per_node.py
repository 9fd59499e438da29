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


def node_gradients(ctx, gpus_per_node: int, batch_size: int, seed: int) -> dict:
    """DDP's gradient next to the average over this rank's node only (a subgroup per node)."""
    nodes = ctx.world_size // gpus_per_node
    node = ctx.rank // gpus_per_node
    X_all, y_all = make_data(seed, ctx.world_size * batch_size)
    X = X_all[ctx.rank * batch_size:(ctx.rank + 1) * batch_size].to(ctx.device)
    y = y_all[ctx.rank * batch_size:(ctx.rank + 1) * batch_size].to(ctx.device)

    local = make_model(LAYERS, seed, activation=torch.nn.Tanh).to(ctx.device)
    F.mse_loss(local(X), y).backward()
    local_grad = flat_grad(local)

    # Every rank must create every subgroup, in the same order.
    groups = [dist.new_group(list(range(n * gpus_per_node, (n + 1) * gpus_per_node)))
              for n in range(nodes)]
    node_average = local_grad.clone()
    dist.all_reduce(node_average, group=groups[node])
    node_average /= gpus_per_node
    summed = local_grad.clone()
    dist.all_reduce(summed)  # plain SUM over all ranks, no division
    for group in groups:  # the pool keeps the main group; do not leak one subgroup per call
        dist.destroy_process_group(group)

    model = make_model(LAYERS, seed, activation=torch.nn.Tanh).to(ctx.device)
    ddp = DDP(model)  # keep a reference: a DDP freed before backward never all-reduces
    F.mse_loss(ddp(X), y).backward()
    return {"node": node, "local_rank": ctx.rank % gpus_per_node, "local": local_grad,
            "node_average": node_average, "sum": summed, "ddp": flat_grad(model)}


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
    summed_grad: np.ndarray  # (n,): all-reduce SUM of the local gradients
    reference_grad: np.ndarray  # (n,)

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def divisor(self) -> float:
        """What DDP divided the summed gradient by (least squares over all elements)."""
        return float(self.summed_grad @ self.ddp_grad / (self.ddp_grad @ self.ddp_grad))


def node_average(nodes: int = 2, gpus_per_node: int = 4, batch_size: int = 8, seed: int = 0,
                 backend: str = "auto", timeout: float = 60.0) -> NodeAveraging:
    """Lay ``nodes * gpus_per_node`` ranks out as nodes; compare DDP with per-node averages."""
    for name, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node),
                        ("batch_size", batch_size)):
        positive_int(name, value)
    results = ddplab.run(node_gradients, nodes * gpus_per_node, backend=backend,
                         timeout=timeout, gpus_per_node=gpus_per_node, batch_size=batch_size,
                         seed=seed)
    ddp = np.stack([r["ddp"] for r in results])
    if not np.allclose(ddp, ddp[0]):  # DDP keeps every replica identical; say so if not
        raise AssertionError("DDP's gradients differ between ranks")
    return NodeAveraging(
        nodes=nodes, gpus_per_node=gpus_per_node, batch_size=batch_size,
        node_of_rank=[r["node"] for r in results],
        local_rank_of_rank=[r["local_rank"] for r in results],
        local_grads=np.stack([r["local"] for r in results]),
        node_averages=np.stack([results[n * gpus_per_node]["node_average"]
                                for n in range(nodes)]),
        ddp_grad=ddp[0], summed_grad=results[0]["sum"],
        reference_grad=reference_gradient([batch_size] * nodes * gpus_per_node, "mean", seed),
    ).on(results)
