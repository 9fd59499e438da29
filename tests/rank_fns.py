"""Rank functions the tests run. They live in a module because rank processes import them."""

import os
import signal
import time
import warnings

import torch
import torch.distributed as dist


def identify(ctx):
    return {"rank": ctx.rank, "world_size": ctx.world_size, "pid": os.getpid(),
            "backend": ctx.backend, "device": str(ctx.device)}


def raise_on(ctx, rank):
    if ctx.rank == rank:
        raise ValueError(f"boom on rank {ctx.rank}")
    dist.barrier()  # the other ranks wait in a collective for the one that failed
    return ctx.rank


def die_on(ctx, rank):
    if ctx.rank == rank:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    return ctx.rank


def sleep(ctx, seconds):
    time.sleep(seconds)
    return ctx.rank


def chatty(ctx):
    print(f"print from rank {ctx.rank}")
    warnings.warn(f"warning from rank {ctx.rank}", stacklevel=1)
    os.write(2, f"raw fd 2 write from rank {ctx.rank}\n".encode())
    return ctx.rank


def tensors(ctx):
    return {"scaled": torch.arange(3.0) * ctx.rank, "nested": [torch.zeros(2, 2)]}


def listening_sockets(ctx):
    """Every listening TCP socket of this rank process, while its group is alive."""
    import psutil

    return [(c.laddr.ip, c.laddr.port) for c in inet_connections(psutil.Process())
            if c.status == psutil.CONN_LISTEN]


def f1_from_counts(ctx, dataset_size, seed):
    """This rank's F1, and F1 from the all-reduced true-positive, false-positive and
    false-negative counts (the training-loop page's sentence on F1)."""
    from ddplab.chapters.training_loop.evaluation import validation_set

    scores, labels = validation_set(dataset_size, seed)
    mine = slice(ctx.rank, dataset_size, ctx.world_size)
    predicted, truth = scores[mine] > 0.5, labels[mine] == 1
    counts = torch.tensor([(predicted & truth).sum(), (predicted & ~truth).sum(),
                           (~predicted & truth).sum()], dtype=torch.float64, device=ctx.device)
    local = 2 * counts[0] / (2 * counts[0] + counts[1] + counts[2])
    dist.all_reduce(counts)
    tp, fp, fn = counts.cpu().tolist()
    return {"local_f1": float(local), "f1": 2 * tp / (2 * tp + fp + fn)}


def sleep_on_the_gpu(ctx, cycles: int) -> float:
    """A kernel that keeps the GPU busy: its call returns at once, its work does not; the
    seconds ``timed_step.timed`` reads for it."""
    from ddplab.common import timed_step

    return timed_step.timed(torch.cuda._sleep, ctx.device, cycles)["step"]


def inet_connections(process) -> list:
    """A process's TCP/UDP sockets: ``net_connections`` from psutil 6 on, ``connections``
    before it (psutil 5.9, which Python 3.13 environments such as Colab's may have)."""
    method = getattr(process, "net_connections", None) or process.connections
    return method("inet")


_DEFAULT_GROUPS = []  # every default group a call of group_and_subgroup has seen here, kept


def group_and_subgroup(ctx):
    """Which default group this is (by object identity, in this process), and a subgroup of
    every rank formed, used and destroyed in this call: its name comes from the counter that
    the kept groups must keep apart."""
    world = dist.group.WORLD
    seen = [i for i, group in enumerate(_DEFAULT_GROUPS) if group is world]
    if not seen:
        _DEFAULT_GROUPS.append(world)
    sub = dist.new_group(list(range(ctx.world_size)))
    total = torch.tensor([ctx.rank + 1])
    dist.all_reduce(total, group=sub)
    name = sub.group_name
    dist.destroy_process_group(sub)
    return {"pid": os.getpid(), "world": seen[0] if seen else len(_DEFAULT_GROUPS) - 1,
            "world_size": world.size(), "subgroup": name, "sum": int(total.item())}


def cuda_view(ctx):
    """What this rank sees of the GPUs: its environment and torch's answer."""
    return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "device": str(ctx.device),
            "available": torch.cuda.is_available(), "count": torch.cuda.device_count()}


def ddp_gradient_on_device(ctx, seed=0, batch_size=4):
    """One DDP step of Linear(8, 3) on ``ctx.device``; the gradient comes back on the host."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(seed)
    model = torch.nn.Linear(8, 3).to(ctx.device)
    ddp = DDP(model)
    g = torch.Generator().manual_seed(seed + 1)
    X = torch.randn(ctx.world_size * batch_size, 8, generator=g)
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    ddp(X[rows].to(ctx.device)).square().mean().backward()
    return {"device": str(model.weight.device), "grad": model.weight.grad.cpu(), "X": X}


def fsdp_gathered_after_forward(ctx, **options):
    """Whether each Linear layer of a small MLP holds its whole (gathered) weight after a
    forward under ``strategies.shard_with_fsdp(**options)``: FSDP2 registers the sharded
    ``DTensor`` again once a unit reshards (``fully_shard``'s docstring)."""
    from torch.distributed.tensor import DTensor

    from ddplab.chapters.memory.strategies import linear_layers, shard_with_fsdp
    from ddplab.common.mlp import make_model

    model = make_model((8, 16, 16, 1), 0).to(ctx.device)
    shard_with_fsdp(model, linear_layers(model), ctx.device.type, **options)
    model(torch.zeros(2, 8, device=ctx.device))
    return [not isinstance(layer.weight, DTensor) for layer in model
            if isinstance(layer, torch.nn.Linear)]


def noting(ctx, call_id, steps):
    """Notes ``steps`` finished steps, then (rank 1 only) where it waits, with a plain printed
    line between them that is no note."""
    from ddplab.engine import hang_watch

    for step in range(steps):
        hang_watch.note(call_id, ctx.rank, step=step)
    print(f"rank {ctx.rank} prints a line of its own")
    if ctx.rank == 1:
        hang_watch.note(call_id, ctx.rank, waiting="the check-in")
    return ctx.rank


def bn_ddp_step(ctx, batches):
    """One DDP backward of a BatchNorm model on this rank's batch (``batches[rank]``): the
    all-reduced gradients and the BatchNorm buffers after it, as DDP leaves them."""
    import torch
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2)))
    x, y = batches[ctx.rank]
    nn.functional.cross_entropy(model(x), y).backward()
    return {"grads": {n: p.grad.clone() for n, p in model.module.named_parameters()},
            "buffers": {n: b.clone() for n, b in model.module.named_buffers()}}
