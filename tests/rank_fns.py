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
