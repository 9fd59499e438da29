"""Imports made once in a process that forks ranks: the engine's forkserver (``preload``) and
the doctor's zygote (``doctor/launch/zygote.py``) both warm themselves this way.

The cyclic garbage collector is off during the imports (it would run hundreds of times over
torch's objects for nothing: 2.4 s instead of 2.9 s here) and ``gc.freeze()`` afterwards keeps
those objects out of every forked child's collections and copy-on-write pages (the advice of
the ``gc.freeze`` documentation for processes that fork without exec).
"""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def frozen_imports():
    """Run the imports inside with the collector off, then freeze what they made."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
