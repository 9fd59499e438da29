"""Fresh ranks after a failure, started in the background.

Any failure during a call ends every rank process of the pool (ARCHITECTURE.md, "Failures").
Started again only by the next call, a reader's next move after a hang would wait for them;
:func:`soon` starts them in a thread instead. It waits :data:`DELAY` first: on a machine of two
cores, ranks starting beside the caller's own work would slow what it does with the failure (a
panel draws the hang's result). ``Pool.refill`` takes the pool's lock, so a call that comes
first starts them itself, and a failure here is left for that call to meet and report.
"""

from __future__ import annotations

import threading
import time
import weakref

DELAY = 1.0  # seconds after the failure
# Seconds the ranks may take to start: a hang panel's 3 s timeout is for its run, and ranks
# starting on a loaded machine of two cores took longer than that.
TIMEOUT = 60.0

_latest = weakref.WeakKeyDictionary()  # pool -> its latest request


def soon(pool, size: int, placement) -> None:
    """Start ``size`` ranks of ``pool`` on ``placement`` after :data:`DELAY`, in a thread. A
    later failure's request replaces this one (its size is the pool's as it is then)."""
    request = _latest[pool] = object()

    def grow():
        time.sleep(DELAY)
        try:
            pool.refill(size, placement, TIMEOUT, wanted=lambda: _latest.get(pool) is request)
        except BaseException:  # noqa: S110 - the next call starts ranks and reports it
            pass

    threading.Thread(target=grow, name="ddplab-respawn", daemon=True).start()
