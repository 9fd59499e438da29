"""Every rank writes its flight record when the first rank's collective fails: the listing of
the hangs page (``book/hangs.md``, "A timeout mid-epoch"), which its run imports and runs.

On gloo nothing dumps the record by itself (NCCL's watchdog does). A dump written in each
rank's own ``except`` is not enough: the rank that is behind is not in a collective, so it
does not raise at the timeout. If it resumes, it first enqueues the collective it was late
for, then fails and dumps, and its last sequence number is the others'; if it stays stuck it
writes nothing. So each rank starts a thread that waits for a key of the job's store
(``Store.wait``, which blocks without holding Python's lock: the main thread trains on), and
the rank that catches the error sets the key before it re-raises: every rank, the one behind
too, dumps at that moment. The rank that caught it waits (``wait_for_others`` seconds at
most) until every rank has counted its dump in the store, so that a store hosted by its own
process is still there while the others write.

The key's name carries ``TORCHELASTIC_RESTART_COUNT`` (torchrun's restarts share the
agent's store). The record itself: ``torch._C._distributed_c10d._dump_fr_trace()``, torch's
own, private, name (declared in ``torch/_C/_distributed_c10d.pyi``), the ring buffer of
``FlightRecorder.hpp`` (``torch/include/torch/csrc/distributed/c10d/``), on by default with
2,000 entries.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import threading
import time

import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace  # torch's own, private, name


@contextlib.contextmanager
def flight_record_on_error(folder, wait_for_others=30.0):
    """Inside the block, a collective's error on any rank (gloo's timeout) makes every rank
    write its flight record to ``folder/fr_trace_<rank>``. Enter it after
    ``init_process_group``, on every rank, with MASTER_ADDR and MASTER_PORT set (torchrun
    sets them)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    failed, dumped = f"fr/failed/{attempt}", f"fr/dumped/{attempt}"
    # two clients of the job's store: one thread's wait holds a client's connection
    waiting, telling = (dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                      timeout=datetime.timedelta(days=30)) for _ in range(2))

    def dump_when_any_rank_fails():
        try:
            waiting.wait([failed])
            with open(os.path.join(folder, f"fr_trace_{rank}"), "wb") as f:
                f.write(_dump_fr_trace())
            waiting.add(dumped, 1)
        except RuntimeError:  # the store is gone (DistError): the job has ended
            pass

    threading.Thread(target=dump_when_any_rank_fails, daemon=True).start()
    try:
        yield
    except RuntimeError:  # gloo: "Timed out waiting ... for recv operation to complete"
        with contextlib.suppress(dist.DistError):  # the store's host may have gone first
            telling.set(failed, str(rank))
            deadline = time.monotonic() + wait_for_others
            while telling.add(dumped, 0) < world_size and time.monotonic() < deadline:
                time.sleep(0.1)
        raise
