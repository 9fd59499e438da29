"""What the reader's code prints (``print`` wrapped: no hook exists), the first lines with a
number in them: ``logged-sum-not-divided`` compares the numbers a rank prints with the
all-reduces before them."""

from __future__ import annotations

import builtins
import re

import ddplab.doctor.records as records
from ddplab.doctor.ranks import patching, where
from ddplab.doctor.ranks import recorder as _recorder

KEPT = 200  # printed lines kept per process
SHOWN = 200  # characters kept of each
NUMBER = re.compile(r"\d")


def install() -> None:
    def make_print(real):
        def print(*args, **kwargs):  # noqa: A001 - the builtin's own name, wrapped
            rec = _recorder.RECORDER
            if rec.counters.get("printed", 0) < KEPT and kwargs.get("file") is None:
                text = " ".join(str(a) for a in args)
                if NUMBER.search(text):
                    spot = where.line()
                    if spot is not None:
                        rec.count("printed")
                        rec.add(records.Printed(
                            text=text[:SHOWN], file=spot[0], line=spot[1],
                            after_drained=rec.counters.get("drained_steps", 0) > 0))
            return real(*args, **kwargs)
        return print

    patching.wrap(builtins, "print", make_print)
