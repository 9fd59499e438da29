"""The same ``ddplab.run`` under torchrun: run ``fn`` right here, on the env:// group.

torchrun (or any launcher that sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``)
has already started one process per rank, so there is no pool: each process runs ``fn`` once
and the results are all-gathered, so every rank returns the same list as the local pool would.

    torchrun --nproc-per-node 4 -m ddplab check
"""

from __future__ import annotations

import atexit
import datetime
import os
import socket


def under_torchrun() -> bool:
    """True in a process started by torchrun (or another env:// launcher)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def is_reporting_process() -> bool:
    """Whether this process should print reports: always, except on ranks > 0 under torchrun."""
    return not under_torchrun() or os.environ["RANK"] == "0"


def launched_world_size() -> int:
    return int(os.environ["WORLD_SIZE"])


def ranks_per_host() -> int:
    return int(os.environ.get("LOCAL_WORLD_SIZE", launched_world_size()))


def loopback_group_store(timeout: float):
    """The group's store on loopback only, where the launcher told every rank
    ``MASTER_ADDR=127.0.0.1`` and no agent hosts the store (``TORCHELASTIC_USE_AGENT_STORE`` is not
    "True"); else None, and ``init_process_group`` makes torch's own.

    Torch's own store on rank 0 listens on every interface (``_create_c10d_store``,
    ``torch/distributed/rendezvous.py``: a host name, no listening socket), which is how ranks
    on other nodes reach it. Ranks told a loopback address reach it nowhere else, so rank 0
    listens on 127.0.0.1 alone (``engine.loopback``) and the others connect as they would."""
    import torch.distributed as dist

    from ddplab.engine.loopback import loopback_store

    if os.environ["MASTER_ADDR"] != "127.0.0.1" or \
            os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
        return None
    world_size, port = launched_world_size(), int(os.environ["MASTER_PORT"])
    if os.environ["RANK"] == "0":
        return loopback_store(world_size, timeout, port=port, world_size=world_size)[0]
    return dist.TCPStore("127.0.0.1", port, world_size, is_master=False,
                         timeout=datetime.timedelta(seconds=timeout))


def run(fn, world_size: int, placement, timeout: float, params: dict) -> list:
    """``fn(ctx, **params)`` on this rank, on ``placement`` (``engine.placement``, resolved once
    for this process with the launcher's ranks per host); every rank's result, by rank.

    The processes are the launcher's, not ours, so a CPU placement here does not hide the GPUs
    (the local pool's ranks do, ``rank.hide_gpus``): torch may have touched CUDA already."""
    import torch.distributed as dist

    from ddplab.engine.rank import RankContext, device_for, plain

    if world_size != launched_world_size():
        raise ValueError(f"world_size={world_size} asked for, but torchrun started "
                         f"{launched_world_size()} processes")
    local_rank = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
    torch_device = device_for(placement.device, local_rank)
    if not dist.is_initialized():
        store = loopback_group_store(timeout)
        dist.init_process_group(placement.backend, timeout=datetime.timedelta(seconds=timeout),
                                **({} if store is None else {
                                    "store": store, "rank": int(os.environ["RANK"]),
                                    "world_size": world_size}))
        atexit.register(dist.destroy_process_group)
    ctx = RankContext(rank=dist.get_rank(), world_size=world_size, local_rank=local_rank,
                      device=torch_device, backend=placement.backend, host=socket.gethostname())
    result = plain(fn(ctx, **params))
    results = [None] * world_size
    dist.all_gather_object(results, result)
    return results
