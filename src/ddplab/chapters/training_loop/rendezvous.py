"""Errors of a group that never forms: the store's port taken, nobody at the store's address,
a network interface that does not exist. Each is made here, on loopback, the way a launcher
meets it.

- **A port in use.** torchrun's rendezvous (and ``init_process_group``'s ``env://``) starts a
  ``TCPStore`` server on MASTER_PORT (29500 unless told). A second job on the same node, or a
  process left from an earlier run, holds it: the server cannot listen. Made here by holding a
  port on 127.0.0.1 and starting a store server on it (which then fails to bind, so nothing of
  ours listens beyond loopback).
- **Nobody at the address.** A node whose MASTER_ADDR / ``--rdzv-endpoint`` names a host or port
  where no store listens (a typo, a firewall, the master not started yet) waits for the store's
  timeout, then gives up. Made here with a client store on a free loopback port, 2 s.
- **A master that starts late.** A client that finds nobody at the address tries again until
  its store's timeout, so a master that starts within it is found. Made here with a client
  started before its master, on loopback.
- **No such interface.** ``GLOO_SOCKET_IFNAME`` (``NCCL_SOCKET_IFNAME`` for NCCL) names the
  network interface the backend is to use; one that does not exist on a node ends that node's
  ``init_process_group``. Made here with gloo in a fresh interpreter (the variable is read when
  the group is formed), one rank on loopback.
"""

from __future__ import annotations

import os
import subprocess
import sys

from ddplab.common.checks import positive_number
from ddplab.common.nobody_listening import SCRIPT as _NOBODY_LISTENING

# Each error is made in a fresh interpreter: the store's C++ side logs its retries to the
# process's stderr, which a page must not show; the message is what the interpreter prints.
_PORT_IN_USE = """
import datetime, socket
import torch.distributed as dist
held = socket.socket()
held.bind(("127.0.0.1", 0))
held.listen()
try:
    dist.TCPStore("127.0.0.1", held.getsockname()[1], 1, True,
                  timeout=datetime.timedelta(seconds=5))
except dist.DistNetworkError as exc:
    print(exc)
"""

_NO_SUCH_INTERFACE = """
import datetime, socket
import torch.distributed as dist
listen = socket.socket()
listen.bind(("127.0.0.1", 0))
listen.listen()
store = dist.TCPStore("127.0.0.1", listen.getsockname()[1], 1, True,
                      master_listen_fd=listen.fileno(), timeout=datetime.timedelta(seconds=10))
try:
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
except RuntimeError as exc:
    print(exc)
"""


_LATE_MASTER = """
import datetime, socket, sys, threading, time
import torch.distributed as dist
late = float(sys.argv[1])
listen = socket.socket()
listen.bind(("127.0.0.1", 0))
port = listen.getsockname()[1]
held = {}

def serve():
    time.sleep(late)  # the master starts late: nobody listens on the port until then
    listen.listen()
    held["store"] = dist.TCPStore("127.0.0.1", port, 2, True, master_listen_fd=listen.fileno(),
                                  wait_for_workers=False)
    listen.detach()  # the store took the socket over

threading.Thread(target=serve).start()
start = time.perf_counter()
client = dist.TCPStore("127.0.0.1", port, 2, False, timeout=datetime.timedelta(seconds=10))
client.set("found", "yes")
print(f"{time.perf_counter() - start:.1f} {client.get('found').decode()}")
"""


def _printed(code: str, *args: str, **env: str) -> str:
    done = subprocess.run([sys.executable, "-c", code, *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)
    return done.stdout.strip()


def port_in_use() -> str:
    """The message of a store server started on a port another process holds."""
    return _printed(_PORT_IN_USE)


def nobody_listening(timeout: float = 2.0) -> str:
    """The message of a client store that finds no server at its address within ``timeout``
    seconds."""
    positive_number("timeout", timeout)
    return _printed(_NOBODY_LISTENING, str(timeout))


def late_master(late: float = 2.0) -> tuple[float, str]:
    """A client store started ``late`` seconds before its master, with a timeout of 10 s: the
    seconds until its first request was answered, and the answer (the client retries its
    connection until its timeout, ``TCPClient::connect``,
    ``torch/csrc/distributed/c10d/TCPStore.cpp``)."""
    positive_number("late", late)
    if late >= 10:
        raise ValueError(f"late must be under the client's timeout of 10 s, got {late!r}")
    seconds, answer = _printed(_LATE_MASTER, str(late)).split()
    return float(seconds), answer


def no_such_interface(name: str = "eth9") -> str:
    """What ``init_process_group("gloo")`` says when ``GLOO_SOCKET_IFNAME`` names an interface
    this machine does not have (one rank, its store on loopback)."""
    return _printed(_NO_SUCH_INTERFACE, GLOO_SOCKET_IFNAME=name)
