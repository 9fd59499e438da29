"""The doctor's own store: evidence travels between ranks here, never over the script's groups.

An extra collective on the script's process group would shift the sequence numbers of the
script's own collectives, and could itself hang or hide a hang; ``TORCH_NCCL_DESYNC_DEBUG``
keeps its notes in a store for the same reason (``TraceUtils.h``). Locally the doctor hosts a
``TCPStore`` on a socket it bound to 127.0.0.1 itself (``TCPStore("127.0.0.1", ...)`` alone
listens on every interface); under torchrun the ranks use torchrun's store under a prefix.

Values are JSON. Keys (under ``PREFIX``): ``mode`` (a ``records.Mode``: what rank 0's process
turned out to be), ``hello/R``, ``evidence/R``, ``done/R``, ``alarm``,
``rollcall``, ``where/R``, ``release``, ``launcher``.
"""

from __future__ import annotations

import datetime
import json
import os
import socket

PREFIX = "ddplab-doctor/"
ADDRESS = "DDPLAB_DOCTOR_STORE"  # host:port, in every process the doctor starts


class Store:
    """A ``TCPStore`` client (or the server) under the doctor's prefix, speaking JSON."""

    def __init__(self, tcp_store, prefix: str = PREFIX):
        import torch.distributed as dist

        self.tcp = tcp_store
        self.raw = dist.PrefixStore(prefix, tcp_store)

    @classmethod
    def host(cls) -> Store:
        """A server on a socket bound to loopback only (``master_listen_fd``), as the engine's
        pool does; the store closes the socket itself."""
        import torch.distributed as dist

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))
            sock.listen(128)
            port = sock.getsockname()[1]
            tcp = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                                master_listen_fd=sock.fileno(), use_libuv=True,
                                timeout=datetime.timedelta(seconds=60))
            sock.detach()
        finally:
            sock.close()
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

    def put(self, key: str, value) -> None:
        self.raw.set(key, json.dumps(value))

    def has(self, key: str) -> bool:
        return self.raw.check([key])

    def get(self, key: str, default=None):
        """The value, or ``default`` when the key is not there (without waiting)."""
        if not self.raw.check([key]):
            return default
        return json.loads(self.raw.get(key))

    def wait(self, key: str, seconds: float) -> bool:
        """Whether ``key`` appeared within ``seconds``."""
        try:
            self.raw.wait([key], datetime.timedelta(seconds=seconds))
        except RuntimeError:  # a timeout (DistStoreError) or a store that went away
            return False
        return True

    def add(self, key: str, amount: int = 1) -> int:
        return self.raw.add(key, amount)
