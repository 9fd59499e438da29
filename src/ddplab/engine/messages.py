"""The messages between the caller and a rank process of the local pool, one named type each.

They travel pickled over one pipe per rank. This module imports no torch: the caller must
never load :mod:`.rank` (it would import dynamo for nothing), yet both sides need these.

caller -> rank: :class:`Run`, :class:`Stop`
rank -> caller: :class:`Ready` (once, when the process has started), then one :class:`Result`
or :class:`Error` per :class:`Run`
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Shipped:
    """A rank function and its parameters, pickled once by the caller (``cluster.ship``) with
    cloudpickle: a function of an importable module by reference, one from a notebook cell or
    a script's ``__main__`` by value. Every rank gets the same bytes; :meth:`load` unpickles
    them with plain ``pickle`` (cloudpickle's output is ordinary pickle data that calls into
    cloudpickle, which the ranks have preloaded)."""

    name: str
    payload: bytes

    def load(self) -> tuple[Callable, dict]:
        return pickle.loads(self.payload)


@dataclasses.dataclass(frozen=True)
class Run:
    """Run ``fn(ctx, **params)`` in group ``generation``: the ranks form it the first time a
    call names it and keep it (``engine.groups``); the pool names the same generation again
    for the same world size. Where (backend and device) is not in the call: a rank process
    learns its placement once, when it starts, and serves it for its life.

    From ``ddplab.run`` and ``Cluster.run``, ``fn`` is a :class:`Shipped` holding the function
    and its parameters, and ``params`` is empty."""

    generation: int
    world_size: int
    timeout: float
    fn: Callable
    params: dict


@dataclasses.dataclass(frozen=True)
class Stop:
    """Shut the kept groups down and exit."""


@dataclasses.dataclass(frozen=True)
class Ready:
    """The rank process has started and reached the pool's store."""

    pid: int


@dataclasses.dataclass(frozen=True)
class Result:
    """What the rank function returned, as plain data (tensors already turned into numpy)."""

    value: Any


@dataclasses.dataclass(frozen=True)
class Error:
    """The rank function (or loading the call) raised."""

    summary: str
    traceback: str


def send(conn, message) -> None:
    conn.send_bytes(pickle.dumps(message))


def receive(conn):
    return pickle.loads(conn.recv_bytes())
