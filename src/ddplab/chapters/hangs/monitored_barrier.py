"""What ``dist.monitored_barrier`` says on rank 0 when ranks never arrive, with and without
``wait_all_ranks``.

The ranks in ``absent`` skip the barrier (they wait out its timeout and return); the others call
``monitored_barrier(group, timeout, wait_all_ranks)`` on a gloo group of their own. By default
rank 0 raises at the first rank that failed to answer ("to fail fast", the docstring of
``monitored_barrier`` in ``torch/distributed/distributed_c10d.py``); with
``wait_all_ranks=True`` it waits for every rank and names all that failed.
"""

from __future__ import annotations

import dataclasses
import datetime
import time

import torch.distributed as dist

import ddplab
from ddplab.common.checks import int_in_range, positive_number
from ddplab.common.results import Result

# ---------------------------------------------------------------- on every rank


def check_in(ctx, absent: list[int], wait_all_ranks: bool, seconds: float) -> str | None:
    """This rank's ``monitored_barrier`` message (None: it passed or never called it)."""
    group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=seconds))
    message = None
    if ctx.rank in absent:
        time.sleep(2 * seconds)  # never arrives within the barrier's timeout
    else:
        try:
            dist.monitored_barrier(group=group, timeout=datetime.timedelta(seconds=seconds),
                                   wait_all_ranks=wait_all_ranks)
        except RuntimeError as exc:
            message = str(exc).splitlines()[0]
    dist.destroy_process_group(group)
    return message


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class BarrierMessage(Result):
    world_size: int
    absent: list[int]
    wait_all_ranks: bool
    rank0_message: str | None  # what rank 0's monitored_barrier raised

    def describe(self) -> str:
        return (f"ranks {self.absent} absent, wait_all_ranks={self.wait_all_ranks}:\n"
                f"  rank 0 raised: {self.rank0_message}")


def run(world_size: int = 3, absent: tuple = (1, 2), wait_all_ranks: bool = False,
        seconds: float = 0.5, timeout: float = 30.0) -> BarrierMessage:
    """Rank 0's message when the ranks in ``absent`` never reach the barrier."""
    int_in_range("world_size", world_size, 2, ddplab.MAX_WORLD_SIZE)
    for rank in absent:
        int_in_range("every rank in absent", rank, 1, world_size - 1)
    positive_number("seconds", seconds)
    results = ddplab.run(check_in, world_size, timeout=timeout,
                         absent=list(absent), wait_all_ranks=bool(wait_all_ranks),
                         seconds=seconds)
    return BarrierMessage.from_ranks(results, world_size=world_size, absent=list(absent),
                                     wait_all_ranks=bool(wait_all_ranks), rank0_message=results[0])
