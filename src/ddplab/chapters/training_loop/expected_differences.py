"""Why an N-rank run differs from one process, cause by cause, and how large each difference is.

The same MLP trains with SGD on the same dataset, under DDP on every rank and in one process,
and each cause of a difference is switched on alone:

- ``logged loss``: rank 0's own loss (what ``if rank == 0: print(loss)`` shows) against the loss
  of the global batch; the training itself is the same.
- ``BatchNorm``: every rank normalises its own ``global_batch_size / world_size`` samples.
- ``dropout, seed + rank`` and ``dropout, one seed``: each rank draws its own masks (or every
  rank the same ones); neither is the mask one process draws for the whole batch.
- ``data order``: the one-process run reads a plain ``DataLoader(shuffle=True)``, which draws
  other global batches than the ranks' ``DistributedSampler``.
- ``float order``: nothing but the order of the float additions: the baseline reads
  ``DistributedSampler(dataset, num_replicas=1, rank=0)`` with batches of ``global_batch_size``,
  which yields, at every step, the samples the ranks' samplers yield together (both shuffle with
  ``randperm`` seeded ``seed + epoch``, and rank r takes positions r, r + W, ... of that list:
  ``DistributedSampler.__iter__``, ``torch/utils/data/distributed.py``), so the only difference
  left is the order in which the per-sample gradients are added.
- ``no sampler (a bug)``: every rank reads the whole dataset in the same shuffled order, so
  every rank trains on the same samples; shown for scale beside the expected differences.

Each rank records the sample indices it trained on, and the caller checks that the ranks'
together are the baseline's batch at every step. The sizes are the largest difference of the
loss (the all-reduced mean, or rank 0's own for ``logged loss``) over the steps, and of the
parameters after each step.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import ddplab
from ddplab.common.checks import an_int, int_in_range, positive_int
from ddplab.common.mlp import make_model
from ddplab.common.results import Result
from ddplab.common.threads import one_thread

LAYERS = (8, 32, 32, 1)
LR = 0.1
DROPOUT = 0.1

LOGGED, BATCHNORM, DROPOUT_PER_RANK, DROPOUT_ONE_SEED, DATA_ORDER, FLOAT_ORDER, NO_SAMPLER = (
    "logged loss", "BatchNorm", "dropout, seed + rank", "dropout, one seed", "data order",
    "float order", "no sampler (a bug)")
CAUSES = (LOGGED, BATCHNORM, DROPOUT_PER_RANK, DROPOUT_ONE_SEED, DATA_ORDER, FLOAT_ORDER,
          NO_SAMPLER)
EXPECTED = CAUSES[:-1]


def dropout(width: int) -> torch.nn.Module:
    """A ``norm`` for ``make_model``: dropout before each activation."""
    return torch.nn.Dropout(DROPOUT)


def make_dataset(dataset_size: int, seed: int) -> TensorDataset:
    """(index, features, target) per sample: the index says which samples a step trained on."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(dataset_size, LAYERS[0], generator=g)
    y = X[:, :1].sin() + 0.3 * torch.randn(dataset_size, 1, generator=g)
    return TensorDataset(torch.arange(dataset_size), X, y)


def train(model, loader, steps: int, device, average=None) -> dict:
    """``steps`` SGD steps over as many epochs as it takes (``set_epoch`` on a
    ``DistributedSampler``): each step's loss, its ``average`` over ranks (the all-reduced
    mean), the parameters after it and the sample indices it read."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    out = {"loss": [], "mean": [], "params": [], "indices": []}
    epoch = 0
    while len(out["loss"]) < steps:
        if isinstance(loader.sampler, DistributedSampler):
            loader.sampler.set_epoch(epoch)
        for index, X, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(X.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            out["loss"].append(loss.item())
            out["mean"].append(average(loss.detach()) if average else loss.item())
            out["params"].append(torch.cat([p.detach().flatten() for p in model.parameters()])
                                 .cpu().numpy())
            out["indices"].append(index.tolist())
            if len(out["loss"]) == steps:
                break
        epoch += 1
    return out


# ---------------------------------------------------------------- on every rank


def all_reduced_mean(loss: torch.Tensor) -> float:
    total = loss.clone()
    dist.all_reduce(total)
    return total.item() / dist.get_world_size()


def rank_runs(ctx, global_batch_size: int, dataset_size: int, steps: int, seed: int) -> dict:
    """Each DDP run of the chapter's causes on this rank; the parameters from rank 0 only."""
    dataset = make_dataset(dataset_size, seed)
    batch_size = global_batch_size // ctx.world_size

    def run(norm=None, torch_seed=None, data=None):
        model = make_model(LAYERS, seed, norm=norm).to(ctx.device)
        torch.manual_seed(seed if torch_seed is None else torch_seed)  # dropout's masks
        ddp = DDP(model)
        data = data or DataLoader(dataset, batch_size=batch_size, sampler=DistributedSampler(
            dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=seed))
        out = train(ddp, data, steps, ctx.device, average=all_reduced_mean)
        if ctx.rank:
            del out["params"]
        return out

    same_order = DataLoader(dataset, batch_size=batch_size, shuffle=True,
                            generator=torch.Generator().manual_seed(seed))
    return {FLOAT_ORDER: run(),
            BATCHNORM: run(norm=torch.nn.BatchNorm1d),
            DROPOUT_PER_RANK: run(norm=dropout, torch_seed=seed + ctx.rank),
            DROPOUT_ONE_SEED: run(norm=dropout, torch_seed=seed),
            NO_SAMPLER: run(data=same_order)}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class ExpectedDifferences(Result):
    world_size: int
    global_batch_size: int
    dataset_size: int
    steps: int
    causes: tuple  # CAUSES
    loss_diff: np.ndarray  # (causes, steps): |loss the run shows - one process's loss|
    param_diff: np.ndarray  # (causes, steps): largest |parameter - one process's| after a step
    same_samples: bool  # the ranks' indices together are the baseline's batch at every step
    shuffled_shared: float  # of a step's samples, the share a plain shuffle=True batch holds too

    json_extras = ("sizes",)

    def size(self, cause: str) -> dict:
        """The largest loss difference over the steps, the parameters' after the first step
        and after the last."""
        i = self.causes.index(cause)
        return {"loss": float(self.loss_diff[i].max()),
                "params_first": float(self.param_diff[i, 0]),
                "params_last": float(self.param_diff[i, -1])}

    def sizes(self) -> dict:
        return {cause: self.size(cause) for cause in self.causes}

    def describe(self) -> str:
        lines = [f"{self.world_size} ranks x {self.global_batch_size // self.world_size} samples "
                 f"against one process x {self.global_batch_size}, {self.steps} steps of SGD "
                 f"on {self.dataset_size} samples",
                 f"{'cause':<22}{'loss, largest':>16}{'params, step 1':>18}"
                 f"{f'params, step {self.steps}':>18}"]
        for cause in self.causes:
            s = self.size(cause)
            lines.append(f"{cause:<22}{s['loss']:>16.1e}{s['params_first']:>18.1e}"
                         f"{s['params_last']:>18.1e}")
        lines.append(f"the same samples at every step as DistributedSampler(num_replicas=1): "
                     f"{self.same_samples}; as shuffle=True: {100 * self.shuffled_shared:.0f}%")
        return "\n".join(lines)


def one_process(dataset, loader, steps: int, seed: int, norm=None) -> dict:
    model = make_model(LAYERS, seed, norm=norm)
    torch.manual_seed(seed)  # dropout's masks
    return train(model, loader, steps, "cpu")


def run(world_size: int = 2, global_batch_size: int = 16, dataset_size: int = 512,
        steps: int = 64, seed: int = 0, timeout: float = 120.0) -> ExpectedDifferences:
    int_in_range("world_size", world_size, 1, ddplab.MAX_WORLD_SIZE)
    for name, value in (("global_batch_size", global_batch_size), ("dataset_size", dataset_size),
                        ("steps", steps)):
        positive_int(name, value)
    an_int("seed", seed)
    if global_batch_size % world_size or dataset_size % global_batch_size:
        raise ValueError(f"global_batch_size ({global_batch_size}) must be a multiple of "
                         f"world_size ({world_size}) and divide dataset_size ({dataset_size}), "
                         "so that every rank and every step holds as many samples")
    ranks = ddplab.run(rank_runs, world_size, timeout=timeout,
                       global_batch_size=global_batch_size, dataset_size=dataset_size,
                       steps=steps, seed=seed)
    dataset = make_dataset(dataset_size, seed)
    same = DataLoader(dataset, batch_size=global_batch_size, sampler=DistributedSampler(
        dataset, num_replicas=1, rank=0, shuffle=True, seed=seed))
    shuffled = DataLoader(dataset, batch_size=global_batch_size, shuffle=True,
                          generator=torch.Generator().manual_seed(seed))
    with one_thread():  # a tiny model: a second thread only waits (common.threads)
        ref = {FLOAT_ORDER: one_process(dataset, same, steps, seed),
               BATCHNORM: one_process(dataset, same, steps, seed, norm=torch.nn.BatchNorm1d),
               DROPOUT_ONE_SEED: one_process(dataset, same, steps, seed, norm=dropout),
               DATA_ORDER: one_process(dataset, shuffled, steps, seed)}
    ref[DROPOUT_PER_RANK] = ref[DROPOUT_ONE_SEED]
    ddp = {cause: ranks[0][cause] for cause in ranks[0]}
    ddp[LOGGED] = ddp[DATA_ORDER] = ddp[FLOAT_ORDER]
    ref[LOGGED] = ref[NO_SAMPLER] = ref[FLOAT_ORDER]

    def loss_diff(cause):
        shown = ddp[cause]["loss" if cause == LOGGED else "mean"]
        return np.abs(np.array(shown) - np.array(ref[cause]["loss"]))

    def param_diff(cause):
        return np.abs(np.array(ddp[cause]["params"]) - np.array(ref[cause]["params"])).max(1)

    together = [sorted(sum((r[FLOAT_ORDER]["indices"][step] for r in ranks), []))
                for step in range(steps)]
    baseline = [sorted(b) for b in ref[FLOAT_ORDER]["indices"]]
    shared = [len(set(a) & set(b)) / global_batch_size
              for a, b in zip(together, ref[DATA_ORDER]["indices"])]
    return ExpectedDifferences.from_ranks(
        ranks, world_size=world_size, global_batch_size=global_batch_size,
        dataset_size=dataset_size, steps=steps, causes=CAUSES,
        loss_diff=np.array([loss_diff(c) for c in CAUSES]),
        param_diff=np.array([param_diff(c) for c in CAUSES]),
        same_samples=together == baseline, shuffled_shared=float(np.mean(shared)))
