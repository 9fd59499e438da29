"""Which sockets listen while something runs, and on which addresses: the running page shows
that its two torchrun nodes listen on loopback alone, and ``tests/test_running_two_nodes.py``
fails on any other address.

Every listening socket of this process and of every process under it is looked up every 50 ms
(``psutil.net_connections``, which reads the kernel's socket tables) while ``run()`` runs; a
socket that lives less than that between two looks can be missed, the stores and gloo's sockets
of a run live seconds. psutil is one of the book's tools (requirements-dev.txt), not something
ddplab needs to run.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import threading


@dataclasses.dataclass(frozen=True)
class Listening:
    address: str
    port: int
    pid: int
    process: str  # its name

    @property
    def beyond_loopback(self) -> bool:
        return not ipaddress.ip_address(self.address).is_loopback


def while_running(run) -> tuple[object, set[Listening]]:
    """``run()``'s result, and every socket that listened under this process while it ran."""
    import psutil

    seen, done = set(), threading.Event()

    def watch():
        me = psutil.Process()
        while not done.is_set():
            ours = {me.pid} | {p.pid for p in me.children(recursive=True)}
            for c in psutil.net_connections("inet"):
                if c.status == psutil.CONN_LISTEN and c.pid in ours:
                    try:
                        name = psutil.Process(c.pid).name()
                    except psutil.NoSuchProcess:
                        name = "?"
                    seen.add(Listening(c.laddr.ip, c.laddr.port, c.pid, name))
            done.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        return run(), seen
    finally:
        done.set()
        watcher.join()


def describe(seen: set[Listening]) -> str:
    """One line: the addresses listened on, with how many sockets and processes."""
    addresses = sorted({s.address for s in seen})
    return (f"listening while they ran: {len(seen)} sockets in "
            f"{len({s.pid for s in seen})} processes, on {', '.join(addresses) or 'nothing'}")
