"""The doctor's own store: evidence travels between ranks here, never over the script's groups.

An extra collective on the script's process group would shift the sequence numbers of the
script's own collectives, and could itself hang or hide a hang; ``TORCH_NCCL_DESYNC_DEBUG``
keeps its notes in a store for the same reason (``TraceUtils.h``). Locally the doctor hosts a
``TCPStore`` on a socket it bound to 127.0.0.1 itself (``TCPStore("127.0.0.1", ...)`` alone
listens on every interface); under torchrun the ranks use torchrun's store under a prefix.

What is stored is one of the typed messages of ``doctor/messages.py``, as JSON, under its
key (``send`` / ``read``), the ``mode`` (a ``records.Mode``: what rank 0's process turned out
to be), a ``messages.Signal``, or a rank's ledger of collectives (``records.Collective``).
"""

from __future__ import annotations

import datetime
import json
import os

import ddplab.doctor.messages as messages
import ddplab.doctor.records as records
from ddplab.doctor.records import Mode

PREFIX = "ddplab-doctor/"
ADDRESS = "DDPLAB_DOCTOR_STORE"  # host:port, in every process the doctor starts
MODE = "mode"


class Store:
    """A ``TCPStore`` client (or the server) under the doctor's prefix, speaking JSON."""

    def __init__(self, tcp_store, prefix: str = PREFIX):
        import torch.distributed as dist

        self.tcp = tcp_store
        self.raw = dist.PrefixStore(prefix, tcp_store)

    @classmethod
    def host(cls) -> Store:
        """A server on loopback only, the engine's pool's kind (``engine.loopback``)."""
        from ddplab.engine.loopback import loopback_store

        tcp, port = loopback_store(128, timeout=60)
        store = cls(tcp)
        store.address = f"127.0.0.1:{port}"
        return store

    @classmethod
    def connect(cls, address: str | None = None) -> Store:
        """A new client connection (each thread that talks to the store gets its own)."""
        import torch.distributed as dist

        host, port = (address or os.environ[ADDRESS]).rsplit(":", 1)
        tcp = dist.TCPStore(host, int(port), is_master=False, use_libuv=True,
                            timeout=datetime.timedelta(seconds=60))
        store = cls(tcp)
        store.address = f"{host}:{port}"
        return store

    def send(self, message, rank: int | None = None) -> None:
        """A typed message (``doctor/messages.py``) under its key."""
        self.raw.set(message.key(rank), json.dumps(messages.to_json(message), default=str))

    def read(self, kind, rank: int | None = None):
        """The message of type ``kind`` under its key, or None (without waiting)."""
        key = kind.key(rank)
        return messages.from_json(kind, json.loads(self.raw.get(key))) if self.has(key) else None

    def signal(self, signal: messages.Signal) -> None:
        self.raw.set(str(signal), "1")

    def signalled(self, signal: messages.Signal) -> bool:
        return self.has(str(signal))

    def say_mode(self, mode: Mode) -> None:
        self.raw.set(MODE, str(mode))

    def mode(self) -> Mode | None:
        return Mode(self.raw.get(MODE).decode()) if self.has(MODE) else None

    def add_to_ledger(self, rank: int, collective: records.Collective) -> None:
        """A collective into ``rank``'s ledger, before it runs."""
        n = self.add(f"ledger/{rank}/count") - 1
        self.raw.set(f"ledger/{rank}/{n}", json.dumps(records.to_json(collective), default=str))

    def ledger(self, rank: int) -> list[records.Collective]:
        """The collectives ``rank`` wrote to its ledger, in order."""
        count = self.add(f"ledger/{rank}/count", 0)
        keys = [f"ledger/{rank}/{i}" for i in range(count)]
        return [records.from_json(records.Collective.KIND, json.loads(self.raw.get(key)))
                for key in keys if self.has(key)]

    def has(self, key: str) -> bool:
        return self.raw.check([key])

    def wait(self, key, seconds: float) -> bool:
        """Whether ``key`` (a key or a ``Signal``) appeared within ``seconds``."""
        try:
            self.raw.wait([str(key)], datetime.timedelta(seconds=seconds))
        except RuntimeError:  # a timeout (DistStoreError) or a store that went away
            return False
        return True

    def add(self, key: str, amount: int = 1) -> int:
        return self.raw.add(key, amount)
