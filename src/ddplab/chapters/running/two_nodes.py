"""Two nodes, run on this machine: two torchrun agents, as two nodes start them, and the ways
the second node fails to join, each made here on loopback.

- **Two nodes.** ``torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint
  127.0.0.1:PORT --rdzv-id ID`` twice, each running ``python -m ddplab check``: the agents meet
  at the endpoint's store, and the node that gets node rank 0 tells the others its address
  (``--local-addr``, else ``socket.getfqdn()``: ``RendezvousStoreInfo.build``,
  ``torch/distributed/elastic/rendezvous/api.py``), where the ranks' process group then forms.
  CI runs the same (``scripts/two_nodes.py``).
- **Nothing listens beyond loopback.** Each store torchrun makes listens on every interface:
  ``TCPStore`` takes a host name to connect to, never an address to listen on, unless it is
  handed a socket already bound (``master_listen_fd``), which torchrun never does. On a cluster
  that is how the other nodes reach it; here it would open the machine for the run's seconds.
  So, with torch's own switches, no agent makes one: the rendezvous store is hosted by this
  process on 127.0.0.1 (``engine.loopback``) and both agents are told they do not host it
  (``--rdzv-conf is_host=false``, ``_create_tcp_store``,
  ``torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py``); node 0's agent shares
  no store of its own with its ranks (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, read by
  ``DynamicRendezvousHandler``), so rank 0 makes the group's store, which ddplab keeps on
  127.0.0.1 when that is the address every rank was given (``engine.torchrun``); and gloo's
  sockets are on ``lo`` (``GLOO_SOCKET_IFNAME``). A network namespace with loopback alone
  (``unshare -n``) would do it for any program, but needs privileges a CI runner may not
  grant, and its sockets, bound to every interface of a namespace, look from outside like
  nothing at all; here every listening socket is on 127.0.0.1, which a test checks
  (``tests/test_running_two_nodes.py``).
- **Node ranks.** Not the order of arrival: ``_mark_rendezvous_complete``
  (``torch/distributed/elastic/rendezvous/dynamic_rendezvous.py``) numbers the participants
  ``sorted``, and a participant is a ``_NodeDesc(addr, pid, local_id)``, a dataclass with
  ``order=True``: by address (``--local-addr``, else the FQDN), then process id.
  :func:`node_ranks` starts a node at 127.0.0.3 first and one at 127.0.0.2 a few seconds later
  (every 127.x address is this machine's loopback): the one that came second is node 0.
- **What ``--local-addr`` moves.** Only the store's address (``MASTER_ADDR``). gloo binds what
  this machine's host name resolves to, unless ``GLOO_SOCKET_IFNAME`` names an interface
  (``ProcessGroupGloo::createDefaultDevice``, pytorch's repository: the loopback fallback and
  its warning "Using the loopback address as fallback", in ``libtorch_cpu.so``, only when the
  name resolves to no usable address). :func:`node_ranks`' workers report the local address
  of their gloo connections: the host name's, not the store's.
- **Connection refused.** A store client at an address where nothing listens: torch 2.13 says
  "Connection refused" only in its trace log (``TORCH_CPP_LOG_LEVEL=INFO``,
  ``TORCH_DISTRIBUTED_DEBUG=DETAIL``: "is not yet listening (errno: 111 - Connection
  refused), will retry"); what it raises is the client's timeout.
- **A join timeout.** One agent of ``--nnodes 2``, alone: it waits ``join_timeout`` seconds
  (600 unless ``--rdzv-conf join_timeout=``) for the other, then raises
  ``RendezvousTimeoutError``. That is the node that hosts the endpoint's store. A node that
  does not host it waits for the store only ``read_timeout`` (60 s unless ``--rdzv-conf
  read_timeout=``: ``_create_tcp_store`` in
  ``torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py``), then raises
  ``RendezvousConnectionError``: ``alone(hosts_store=False)`` (``is_host=false``, as on a
  node whose addresses are not the endpoint's).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

from ddplab.common import nobody_listening
from ddplab.common.checks import positive_number
from ddplab.common.results import Result
from ddplab.engine.loopback import loopback_store

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
# Every node's environment here: two "nodes" share this machine's cores (one thread a rank, as
# torchrun sets for several ranks on a node), no agent shares a store of its own with its
# ranks, gloo's sockets on loopback.
LOOPBACK_ENV = {"OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
                "GLOO_SOCKET_IFNAME": "lo"}


@contextlib.contextmanager
def rendezvous_on_loopback():
    """The rendezvous store, hosted by this process on 127.0.0.1 alone while the block runs:
    yields its endpoint, ``127.0.0.1:PORT``."""
    store, port = loopback_store(16)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        del store


def node_command(endpoint: str, run_id: str, nproc_per_node: int = 1, **conf) -> list[str]:
    """One node's torchrun line for a c10d rendezvous at ``endpoint`` (``HOST:PORT``), a store
    this node does not host (``rendezvous_on_loopback``); the address it gives the other nodes
    (``--local-addr``) is the endpoint's host, as it is when every node is this machine."""
    command = ["torchrun", "--nnodes", "2", "--nproc-per-node", str(nproc_per_node),
               "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id,
               "--local-addr", endpoint.rsplit(":", 1)[0]]  # here every node is this machine
    conf = {"is_host": "false", **conf}
    return command + ["--rdzv-conf", ",".join(f"{k}={v}" for k, v in conf.items())]


def _agents(commands: list[list[str]], timeout: float) -> list[tuple[int | None, str, str]]:
    """Each command, ``torchrun`` run as this Python's module, all at once, each in a session
    of its own (ended with its children at ``timeout``): (exit code, stdout, stderr)."""
    env = {**os.environ, **LOOPBACK_ENV}
    procs = [subprocess.Popen(TORCHRUN + c[1:] + ["-m", "ddplab", "check"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True, env=env) for c in commands]
    start, out = time.perf_counter(), []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=max(timeout - (time.perf_counter() - start),
                                                       1.0))
        except subprocess.TimeoutExpired:
            stdout, stderr = "", f"no result within {timeout:g} s"
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        out.append((p.returncode, stdout, stderr))
    return out


@dataclasses.dataclass
class TwoNodes(Result):
    commands: list[str]  # each node's line, as run
    exit_codes: list[int]
    printed: str  # what global rank 0 printed, on whichever node it ran
    seconds: float

    def describe(self) -> str:
        lines = [f"node {i}: " + textwrap.fill(c, 88, subsequent_indent="    ",
                                               break_on_hyphens=False).replace("\n", " \\\n")
                 for i, c in enumerate(self.commands)]
        env = " ".join(f"{k}={v}" for k, v in LOOPBACK_ENV.items())
        return "\n".join([*lines, *textwrap.wrap(f"each node's environment: {env}", 96,
                                                  subsequent_indent="    "),
                          f"exit codes {self.exit_codes}, {self.seconds:.0f} s; rank 0 printed:",
                          self.printed.rstrip()])


def run(timeout: float = 180.0) -> TwoNodes:
    """Two torchrun nodes on this machine (c10d rendezvous on 127.0.0.1), each one process,
    running ``python -m ddplab check``."""
    positive_number("timeout", timeout)
    start = time.perf_counter()
    with rendezvous_on_loopback() as endpoint:
        commands = [node_command(endpoint, "ddplab-two-nodes")] * 2
        done = _agents(commands, timeout)
    shown = [" ".join(c + ["-m", "ddplab", "check"]) for c in commands]
    printed = [out for _, out, _ in done if out.strip()]
    return TwoNodes(shown, [code for code, _, _ in done], printed[0] if len(printed) == 1
                    else "\n".join(err[-2000:] for _, _, err in done),
                    time.perf_counter() - start)


@dataclasses.dataclass
class Refused(Result):
    traced: str  # the trace log's line, with "Connection refused"
    raised: str  # what the client raised

    def describe(self) -> str:
        return "\n".join(["in the trace log:",
                          textwrap.fill(self.traced, 96, initial_indent="  ",
                                        subsequent_indent="  "),
                          "raised:", textwrap.fill(self.raised, 96, initial_indent="  ",
                                                   subsequent_indent="  ")])


def refused(timeout: float = 2.0) -> Refused:
    """A store client at a loopback port where nothing listens, its trace log on."""
    positive_number("timeout", timeout)
    done = subprocess.run([sys.executable, "-c", nobody_listening.SCRIPT, str(timeout)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TORCH_CPP_LOG_LEVEL": "INFO",
                               "TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    line = next(line for line in done.stderr.splitlines() if "Connection refused" in line)
    return Refused(re.sub(r"^\[\w+ [^\]]*\] ", "", line), done.stdout.strip())


def alone(join_timeout: int = 2, timeout: float = 120.0, hosts_store: bool = True,
          read_timeout: int = 60) -> str:
    """The last line one torchrun agent of ``--nnodes 2`` prints when the other never comes.
    With ``hosts_store``, the endpoint's store is up (hosted here, on loopback) and the agent
    waits ``join_timeout`` for the other node; without, nobody hosts it, as for a node that
    is not the endpoint's host started first, and the agent waits for the store only
    ``read_timeout`` seconds."""
    positive_number("join_timeout", join_timeout)
    positive_number("read_timeout", read_timeout)
    if hosts_store:
        with rendezvous_on_loopback() as endpoint:
            command = node_command(endpoint, "ddplab-alone", join_timeout=join_timeout)
            (_, _, stderr), = _agents([command], timeout)
    else:  # a port nothing listens on: the agent is told it does not host the store
        command = node_command(f"127.0.0.1:{_free_port()}", "ddplab-alone",
                               join_timeout=join_timeout, read_timeout=read_timeout)
        (_, _, stderr), = _agents([command], timeout)
    return stderr.strip().splitlines()[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(call, *args, **kwargs) -> tuple[object, float]:
    """``call(*args, **kwargs)`` and the seconds it took."""
    start = time.perf_counter()
    return call(*args, **kwargs), time.perf_counter() - start


# each worker: its node rank, its store's address, and the local address of its gloo
# connections (its connected sockets, but the store's: rank 0 serves it here)
_WORKER = """
import datetime, os, socket
import torch, torch.distributed as dist
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
wait = datetime.timedelta(seconds=60)
if rank == 0:  # the group's store on node 0's own address alone (torch's would take them all)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((addr, port))
    listener.listen(16)
    store = dist.TCPStore(addr, port, size, True, timeout=wait,
                          master_listen_fd=listener.fileno(), use_libuv=True)
else:
    store = dist.TCPStore(addr, port, size, False, timeout=wait)
dist.init_process_group("gloo", store=store, rank=rank, world_size=size)
dist.all_reduce(torch.ones(1))
store_port, gloo = int(os.environ["MASTER_PORT"]), set()
for fd in map(int, os.listdir("/proc/self/fd")):
    try:
        s = socket.socket(fileno=fd)
    except OSError:
        continue
    try:
        if s.family in (socket.AF_INET, socket.AF_INET6) and s.type == socket.SOCK_STREAM:
            peer, own = s.getpeername(), s.getsockname()
            if store_port not in (peer[1], own[1]):  # the store's, client or server side
                gloo.add(s.getsockname()[0].removeprefix("::ffff:"))
    except OSError:
        pass
    finally:
        s.detach()
print(os.environ["GROUP_RANK"], os.environ["MASTER_ADDR"], ",".join(sorted(gloo)) or "-",
      flush=True)
dist.destroy_process_group()
"""


@dataclasses.dataclass
class NodeRanks(Result):
    addresses: list[str]  # each node's --local-addr, in the order they were started
    delay: float  # seconds between the two starts
    node_ranks: list[int]
    store_address: list[str]  # MASTER_ADDR each node's worker got
    gloo_address: list[str]  # the local address of each worker's gloo connections
    host_name_address: str  # what this machine's host name resolves to
    gloo_warned: bool  # "Using the loopback address as fallback" in any output

    def describe(self) -> str:
        lines = [f"host name {socket.gethostname()!r} resolves to {self.host_name_address}"]
        lines += [f"started {'first' if i == 0 else f'{self.delay:g} s later'}: "
                  f"--local-addr {a}: node rank {r}, store at {m}, gloo on {g}"
                  for i, (a, r, m, g) in enumerate(zip(self.addresses, self.node_ranks,
                                                       self.store_address,
                                                       self.gloo_address))]
        return "\n".join(lines + [f"gloo's loopback warning: {self.gloo_warned}"])


def node_ranks(addresses: tuple[str, str] = ("127.0.0.3", "127.0.0.2"), delay: float = 5.0,
               timeout: float = 180.0) -> NodeRanks:
    """Two torchrun nodes on this machine, the one at ``addresses[0]`` started ``delay``
    seconds before the other, each one gloo worker, ``GLOO_SOCKET_IFNAME`` unset; every store
    on a loopback address alone (the rendezvous's hosted here, the group's bound to node 0's
    address by its rank 0)."""
    positive_number("delay", delay)
    env = {**os.environ, **LOOPBACK_ENV}
    if socket.gethostbyname(socket.gethostname()).startswith("127."):
        del env["GLOO_SOCKET_IFNAME"]  # gloo then binds the host name's address: loopback here
    procs, outs = [], []
    with rendezvous_on_loopback() as endpoint:
        for i, address in enumerate(addresses):
            if i:
                time.sleep(delay)
            command = node_command(endpoint, "ddplab-node-ranks")
            command[command.index("--local-addr") + 1] = address
            procs.append(subprocess.Popen(
                TORCHRUN + command[1:] + ["--no-python", sys.executable, "-c", _WORKER],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                start_new_session=True, env=env))
        for p in procs:
            try:
                outs.append(p.communicate(timeout=timeout))
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    said = [out.split() for out, _ in outs]
    return NodeRanks(list(addresses), delay, [int(w[0]) for w in said], [w[1] for w in said],
                     [w[2] for w in said], socket.gethostbyname(socket.gethostname()),
                     any("loopback address as fallback" in out + err for out, err in outs))
