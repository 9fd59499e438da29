"""Records of printed lines (ranks/watch/prints.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ddplab.doctor.records.base import Located


@dataclasses.dataclass(frozen=True)
class Printed(Located):
    """A line the reader's code printed (to stdout) with a number in it, cut at 200
    characters. ``after_drained`` once an optimizer step the doctor does not count has run (an
    epoch's one batch, training ended): from there a run's numbers are no longer comparable
    with another run's."""

    KIND: ClassVar[str] = "printed"
    text: str
    after_drained: bool = False
