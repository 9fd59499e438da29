"""Records of printed lines (ranks/watch/prints.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ddplab.doctor.records.base import Located


@dataclasses.dataclass(frozen=True)
class Printed(Located):
    """A line the reader's code printed (to stdout) with a number in it, cut at 200
    characters."""

    KIND: ClassVar[str] = "printed"
    text: str
