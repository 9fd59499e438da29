"""A TCPStore that listens on loopback only, for the engine's pool and the doctor alike.

``TCPStore("127.0.0.1", port, is_master=True)`` binds its listening socket to every interface
(the host name is where clients connect, not where the server listens). So the socket is
bound to ``("127.0.0.1", 0)`` here and handed to the store as ``master_listen_fd``; with libuv
the store takes the descriptor over and closes it when it is destroyed, so this side detaches
it. Nothing of ddplab listens beyond loopback.
"""

from __future__ import annotations

import datetime
import socket


def loopback_store(backlog: int, timeout: float | None = None, port: int = 0,
                   world_size: int | None = None):
    """``(store, port)``: a ``TCPStore`` server on 127.0.0.1 only, at ``port`` (0: a free
    one), with room for ``backlog`` waiting connections; ``timeout`` in seconds (None: torch's
    default); ``world_size``, where given, is the number of clients it counts as torch's own
    stores do."""
    import torch.distributed as dist

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(backlog)
        port = sock.getsockname()[1]
        extra = {} if timeout is None else {"timeout": datetime.timedelta(seconds=timeout)}
        if world_size is not None:
            extra["world_size"] = world_size
        store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                              master_listen_fd=sock.fileno(), use_libuv=True, **extra)
        sock.detach()  # the store owns the descriptor now
    finally:
        sock.close()
    return store, port
