"""A timeout in the middle of an epoch, read from the flight recorder's dumps, on gloo.

torch 2.13 records gloo's collectives too: with ``TORCH_FR_BUFFER_SIZE`` (or
``TORCH_NCCL_TRACE_BUFFER_SIZE``) above 0 in the environment when the group is formed, every
collective a rank starts is kept in a ring buffer (``FlightRecorder<c10::Event>`` in
``libtorch_cpu``), which ``torch._C._distributed_c10d._dump_fr_trace()`` returns pickled. On
gloo nothing writes it on a timeout (NCCL's watchdog does, ``TORCH_NCCL_DUMP_ON_TIMEOUT``): the
script dumps it itself, where the timeout is raised.

The run: two fresh interpreters (the recorder is set up when a group is formed, and a group
that timed out is not reused), a gloo group on a loopback store with a short timeout; each
step all-reduces a gradient-sized tensor; at step ``stuck_at`` rank 1 stops in its own work
(a stuck data loader, a slow file system) for longer than the timeout. Rank 0's all-reduce of
that step times out; each rank then writes its dump to ``<folder>/fr_trace_<rank>``.

What the dumps say: each entry's ``collective_seq_id``, the operation (``profiling_name``) and
the sizes; ``pg_status`` the last collective each rank enqueued. The rank whose last is lower
never reached the next collective. On gloo every entry's ``state`` stays ``"scheduled"``, so
the sequence numbers are the reading. torch's own reader, ``torchfrtrace``, fails on gloo's
dumps in 2.13 (a ``KeyError``: the dump's ``pg_config`` names the group ``''``, its entries
``'0'``); it is run and its error shown.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import socket
import subprocess
import sys
import tempfile
import textwrap

from ddplab.common.checks import int_in_range, positive_number
from ddplab.common.results import Result

_RANK = """
import datetime, os, time
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace

rank = int(os.environ["RANK"])
steps, stuck_at = int(os.environ["FR_STEPS"]), int(os.environ["FR_STUCK_AT"])
timeout = float(os.environ["FR_TIMEOUT"])
fd = int(os.environ.get("FR_STORE_FD", "-1"))
store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), 2, rank == 0,
                      **({"master_listen_fd": fd} if rank == 0 else {}))
dist.init_process_group("gloo", store=store, rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=timeout))
gradient = torch.ones(1000)
try:
    for step in range(steps):
        if rank == 1 and step == stuck_at:
            time.sleep(2 * timeout)  # stuck in its own work, not in a collective
            break
        dist.all_reduce(gradient)
except RuntimeError as exc:
    print(str(exc).splitlines()[0])
with open(os.path.join(os.environ["FR_FOLDER"], f"fr_trace_{rank}"), "wb") as f:
    f.write(_dump_fr_trace())  # on gloo nothing dumps by itself: here, after the timeout
"""


@dataclasses.dataclass
class Entry:
    seq: int  # collective_seq_id
    op: str  # profiling_name, e.g. "gloo:all_reduce"
    sizes: list  # input_sizes
    state: str


@dataclasses.dataclass
class FlightRecord(Result):
    steps: int
    stuck_at: int
    timeout: float
    raised: str  # what rank 0's timed-out all-reduce raised
    last_enqueued: list[int]  # pg_status' last_enqueued_collective, per rank
    entries: list[list[Entry]]  # per rank, oldest first
    torchfrtrace: str  # the last line torch's own reader printed

    @property
    def behind(self) -> int:
        """The rank whose last collective is the lowest: it never reached the next one."""
        return self.last_enqueued.index(min(self.last_enqueued))

    @property
    def waited_in(self) -> Entry:
        """The collective the other ranks waited in: the first one the rank behind lacks."""
        ahead = self.last_enqueued.index(max(self.last_enqueued))
        return next(e for e in self.entries[ahead] if e.seq == self.last_enqueued[self.behind]
                    + 1)

    json_extras = ("behind",)

    def describe(self) -> str:
        lines = [textwrap.fill(f"rank 0 raised: {self.raised}", 98, subsequent_indent="  ")]
        for rank, entries in enumerate(self.entries):
            last = entries[-3:]
            lines.append(f"rank {rank}: last collective enqueued {self.last_enqueued[rank]}; "
                         f"its last entries:")
            lines += [f"  seq {e.seq:>2}  {e.op:<16} sizes {e.sizes}  state {e.state}"
                      for e in last]
        w = self.waited_in
        lines.append(textwrap.fill(f"rank {self.behind} is behind: it never called collective "
                                   f"{w.seq} ({w.op}, sizes {w.sizes}), where the others "
                                   f"waited", 98, subsequent_indent="  "))
        return "\n".join(lines)


def _entries(dump: dict) -> list[Entry]:
    return [Entry(e["collective_seq_id"], e["profiling_name"], e["input_sizes"], e["state"])
            for e in dump["entries"]]


def run(steps: int = 6, stuck_at: int = 4, timeout: float = 2.0) -> FlightRecord:
    """Two gloo ranks in fresh interpreters, rank 1 stuck at step ``stuck_at``: the dumps."""
    int_in_range("steps", steps, 2, 1000)
    int_in_range("stuck_at", stuck_at, 1, steps - 1)
    positive_number("timeout", timeout)
    with tempfile.TemporaryDirectory(prefix="ddplab-fr-") as folder, \
            socket.socket() as listen:
        listen.bind(("127.0.0.1", 0))
        listen.listen()
        procs = []
        for rank in range(2):
            env = {**os.environ, "RANK": str(rank), "MASTER_PORT": str(listen.getsockname()[1]),
                   "TORCH_FR_BUFFER_SIZE": "100", "GLOO_SOCKET_IFNAME": "lo",
                   "OMP_NUM_THREADS": "1", "FR_STEPS": str(steps),
                   "FR_STUCK_AT": str(stuck_at), "FR_TIMEOUT": str(timeout),
                   "FR_FOLDER": folder}
            fds = ()
            if rank == 0:
                env["FR_STORE_FD"], fds = str(listen.fileno()), (listen.fileno(),)
            procs.append(subprocess.Popen([sys.executable, "-c", _RANK], env=env,
                                          pass_fds=fds, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        printed = [p.communicate(timeout=60 + 4 * timeout) for p in procs]
        dumps = []
        for rank in range(2):
            with open(os.path.join(folder, f"fr_trace_{rank}"), "rb") as f:
                dumps.append(pickle.load(f))
        reader = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder."
                                 "fr_trace", folder, "--prefix", "fr_trace_"],
                                capture_output=True, text=True, timeout=120)
    said = (reader.stdout + reader.stderr).strip().splitlines()
    return FlightRecord(
        steps, stuck_at, timeout, re.sub(r"^\[[^\]]*\] ", "", printed[0][0].strip()),
        [int(next(iter(d["pg_status"].values()))["last_enqueued_collective"]) for d in dumps],
        [_entries(d) for d in dumps], said[-1] if said else "")
