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

    return [(c.laddr.ip, c.laddr.port) for c in psutil.Process().net_connections("inet")
            if c.status == psutil.CONN_LISTEN]


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
