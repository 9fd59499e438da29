"""Seeing the collectives Python code starts: a spy on ``ProcessGroup`` methods.

``dist.all_reduce`` calls ``group.allreduce([tensor], opts)`` and ``dist.send`` /
``dist.isend`` / ``dist.batch_isend_irecv`` call ``group.send`` (``torch/distributed/
distributed_c10d.py``), so replacing those methods on the class for a while sees every such
call from Python, whoever makes it (DDP's forward, Join, a reader's code). DDP's reducer
all-reduces its buckets from C++, which the spy does not see.
"""

from __future__ import annotations

import contextlib

import torch.distributed as dist


@contextlib.contextmanager
def watching(see, *methods: str):
    """Inside the block, every call of the ``ProcessGroup`` methods named (``allreduce``,
    ``send``, ...) first calls ``see(method, *args, **kwargs)``, then the method. Each class
    entry (a pybind11 instancemethod) is put back afterwards: the attribute read through the
    class is a plain builtin that would no longer bind ``self``."""
    entries = {method: dist.ProcessGroup.__dict__[method] for method in methods}

    def spy_on(method):
        call = getattr(dist.ProcessGroup, method)

        def spy(group, *args, **kwargs):
            see(method, *args, **kwargs)
            return call(group, *args, **kwargs)

        return spy

    for method in methods:
        setattr(dist.ProcessGroup, method, spy_on(method))
    try:
        yield
    finally:
        for method, entry in entries.items():
            setattr(dist.ProcessGroup, method, entry)
