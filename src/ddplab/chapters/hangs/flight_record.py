"""A timeout in the middle of an epoch, read from the flight recorder's dumps, on gloo.

torch 2.13 records gloo's collectives too, by default: ``FlightRecorder``'s buffer holds
``TORCH_FR_BUFFER_SIZE`` (or ``TORCH_NCCL_TRACE_BUFFER_SIZE``) entries, 2,000 when neither is
set, and 0 turns it off (``torch/include/torch/csrc/distributed/c10d/FlightRecorder.hpp``).
Every collective a rank starts is kept, which ``torch._C._distributed_c10d._dump_fr_trace()``
returns pickled. On gloo nothing writes it out on a timeout (NCCL's watchdog does).

The run: ``world_size`` fresh interpreters (the recorder is set up when a group is formed, and
a group that timed out is not reused), a gloo group on a loopback store with a short timeout;
each step all-reduces a gradient-sized tensor. At step ``stuck_at`` rank 1 is slow in its own
work (a data loader, a file system) for twice the timeout, then goes on; a rank 2, where there
is one, is stuck there for good and is ended from outside once the others have exited. Rank
0's all-reduce of that step times out. Each rank then dumps to ``<folder>/fr_trace_<rank>`` by
one of two recipes:

- ``"listing"``: the page's listing, ``flight_record_on_error`` (its own module), imported and
  run as the page shows it: every rank dumps when rank 0 catches its timeout, the ranks that
  are behind too;
- ``"in_except"``: each rank dumps in its own ``except RuntimeError``. Rank 1 resumes, first
  enqueues the all-reduce it was late for, fails, and dumps the same last number as rank 0;
  rank 2 never raises and leaves no dump.

What the dumps say: each entry's ``collective_seq_id``, the operation (``profiling_name``),
the sizes and ``time_created_ns`` (``c10::getTime()``, the system's real-time clock on Linux:
``torch/include/c10/util/ApproximateClock.h``); ``pg_status`` the last collective each rank
enqueued. A rank whose last number is lower, or that left no dump, is behind; where the
numbers are equal, the rank whose entry of that number was created last came late to it. On
gloo every entry's ``state`` stays ``"scheduled"``. torch's own reader, ``torchfrtrace``,
fails on gloo's dumps in 2.13 (a ``KeyError``: the dump's ``pg_config`` names the group
``''``, its entries ``'0'``); it is run and its error shown.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap

from ddplab.common.checks import int_in_range, one_of, positive_number
from ddplab.common.results import Result

RECIPES = ("listing", "in_except")
BUFFER_SIZE = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # unset: 2,000

_RANK = """
import datetime, os, time
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace
from ddplab.chapters.hangs.flight_record_on_error import flight_record_on_error

rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
steps, stuck_at = int(os.environ["FR_STEPS"]), int(os.environ["FR_STUCK_AT"])
timeout, folder = float(os.environ["FR_TIMEOUT"]), os.environ["FR_FOLDER"]
fd = int(os.environ.get("FR_STORE_FD", "-1"))
store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), world_size, rank == 0,
                      **({"master_listen_fd": fd} if rank == 0 else {}))
dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                        timeout=datetime.timedelta(seconds=timeout))


def train():
    gradient = torch.ones(1000)
    for step in range(steps):
        if step == stuck_at and rank == 1:
            time.sleep(2 * timeout)  # a slow loader: its own work, not a collective
        if step == stuck_at and rank == 2:
            time.sleep(3600)  # stuck for good
        dist.all_reduce(gradient)


try:
    if os.environ["FR_RECIPE"] == "listing":
        with flight_record_on_error(folder):  # the page's listing
            train()
    else:
        try:
            train()
        except RuntimeError:
            with open(os.path.join(folder, f"fr_trace_{rank}"), "wb") as f:
                f.write(_dump_fr_trace())
            raise
except RuntimeError as exc:
    print(str(exc).splitlines()[0])
"""


@dataclasses.dataclass
class Entry:
    seq: int  # collective_seq_id
    op: str  # profiling_name, e.g. "gloo:all_reduce"
    sizes: list  # input_sizes
    state: str
    created_ns: int  # time_created_ns


@dataclasses.dataclass
class FlightRecord(Result):
    recipe: str
    world_size: int
    steps: int
    stuck_at: int
    timeout: float
    raised: str  # what rank 0's timed-out all-reduce raised
    last_enqueued: list[int | None]  # pg_status' last_enqueued_collective; None: no dump
    entries: list[list[Entry] | None]  # per rank, oldest first; None: no dump
    torchfrtrace: str  # the last line torch's own reader printed ("" where it was not run)

    @property
    def without_dump(self) -> list[int]:
        """The ranks that wrote no dump: behind, and never raised."""
        return [r for r, last in enumerate(self.last_enqueued) if last is None]

    @property
    def behind(self) -> list[int]:
        """The ranks whose last collective is lower than another's: they never reached it."""
        top = max(last for last in self.last_enqueued if last is not None)
        return [r for r, last in enumerate(self.last_enqueued) if last is not None
                and last < top]

    def created_after(self, seq: int) -> dict[int, float]:
        """Each dumped rank's entry ``seq``: seconds after the first rank created its own."""
        made = {r: e.created_ns for r, entries in enumerate(self.entries) if entries
                for e in entries if e.seq == seq}
        first = min(made.values())
        return {r: (ns - first) / 1e9 for r, ns in made.items()}

    @property
    def waited_in(self) -> Entry:
        """The collective the ranks ahead waited in: the highest number, as first created."""
        top = max(last for last in self.last_enqueued if last is not None)
        return min((e for entries in self.entries if entries for e in entries
                    if e.seq == top), key=lambda e: e.created_ns)

    json_extras = ("behind", "without_dump")

    def describe(self) -> str:
        lines = [f"{self.recipe}: {self.world_size} ranks; rank 1 slow at step "
                 f"{self.stuck_at}" + (", rank 2 stuck there" if self.world_size > 2 else ""),
                 textwrap.fill(f"rank 0 raised: {self.raised}", 98, subsequent_indent="  ")]
        for rank, entries in enumerate(self.entries):
            if entries is None:
                lines.append(f"rank {rank}: no dump")
                continue
            lines.append(f"rank {rank}: last collective enqueued {self.last_enqueued[rank]}; "
                         f"its last entries (created: seconds after the first rank's):")
            lines += [f"  seq {e.seq:>2}  {e.op:<16} sizes {e.sizes}  state {e.state}  "
                      f"created +{self.created_after(e.seq)[rank]:.1f} s"
                      for e in entries[-2:]]
        return "\n".join(lines)


def _entries(dump: dict) -> list[Entry]:
    return [Entry(e["collective_seq_id"], e["profiling_name"], e["input_sizes"], e["state"],
                  e["time_created_ns"]) for e in dump["entries"]]


def _end(proc: subprocess.Popen) -> None:
    """A rank still stuck once the others have exited: ended with its session."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def run(steps: int = 6, stuck_at: int = 4, timeout: float = 2.0, recipe: str = "listing",
        world_size: int = 2) -> FlightRecord:
    """``world_size`` gloo ranks in fresh interpreters, rank 1 slow at step ``stuck_at`` (rank
    2 stuck there), each rank dumping by ``recipe``: the dumps, read."""
    int_in_range("steps", steps, 2, 1000)
    int_in_range("stuck_at", stuck_at, 1, steps - 1)
    int_in_range("world_size", world_size, 2, 3)
    positive_number("timeout", timeout)
    one_of("recipe", recipe, RECIPES)
    with tempfile.TemporaryDirectory(prefix="ddplab-fr-") as folder, \
            socket.socket() as listen:
        listen.bind(("127.0.0.1", 0))
        listen.listen()
        procs = []
        for rank in range(world_size):
            env = {k: v for k, v in os.environ.items() if k not in BUFFER_SIZE}  # the default
            env.update(RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(listen.getsockname()[1]), GLOO_SOCKET_IFNAME="lo",
                       OMP_NUM_THREADS="1", FR_STEPS=str(steps), FR_STUCK_AT=str(stuck_at),
                       FR_TIMEOUT=str(timeout), FR_FOLDER=folder, FR_RECIPE=recipe)
            fds = ()
            if rank == 0:
                env["FR_STORE_FD"], fds = str(listen.fileno()), (listen.fileno(),)
            procs.append(subprocess.Popen([sys.executable, "-c", _RANK], env=env,
                                          pass_fds=fds, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True,
                                          start_new_session=True))
        try:
            printed = [p.communicate(timeout=60 + 6 * timeout) for p in procs[:2]]
        finally:
            for p in procs:
                _end(p)
        dumps = []
        for rank in range(world_size):
            path = os.path.join(folder, f"fr_trace_{rank}")
            if os.path.exists(path):
                with open(path, "rb") as f:
                    dumps.append(pickle.load(f))
            else:
                dumps.append(None)
        said = []
        if None not in dumps:
            reader = subprocess.run([sys.executable, "-m", "torch.distributed."
                                     "flight_recorder.fr_trace", folder, "--prefix",
                                     "fr_trace_"], capture_output=True, text=True, timeout=120)
            said = (reader.stdout + reader.stderr).strip().splitlines()
    return FlightRecord(
        recipe, world_size, steps, stuck_at, timeout,
        re.sub(r"^\[[^\]]*\] ", "", printed[0][0].strip()),
        [None if d is None else int(next(iter(d["pg_status"].values()))
                                    ["last_enqueued_collective"]) for d in dumps],
        [None if d is None else _entries(d) for d in dumps], said[-1] if said else "")
