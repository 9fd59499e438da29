"""Tiny computations in the caller on one thread: a reference step of a small MLP.

The caller (a notebook's kernel) keeps torch's default of one intra-op thread per core; the
ranks set one each (``engine.rank``). For a model of a few hundred parameters the second
thread only adds its hand-off and spin-wait: one process's 30 SGD steps of a (8, 32, 1) MLP
took 16 ms on two threads and 8 ms on one on the 2-core machine here, and up to 0.7 s on two
when other processes held the cores (a parallel region waits for a thread that is not
running).
"""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def one_thread():
    """Run the block on one intra-op thread, then give torch back its own number."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
