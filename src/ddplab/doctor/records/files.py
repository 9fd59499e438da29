"""Records of files (ranks/watch/files.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ddplab.doctor.records.base import Located


@dataclasses.dataclass(frozen=True)
class Write(Located):
    """A file the reader's code opened for writing (``how``: ``open`` or ``torch.save``), with
    ``open``'s mode (``"w"``, ``"a"``, ...; None for torch.save and a flags-only open). A
    ``torch.save`` of a state dict whose keys all start with ``module.`` (itself or one value of
    a saved dict) has their number and the first (``prefixed``, ``first_key``)."""

    KIND: ClassVar[str] = "write"
    path: str
    how: str
    mode: str | None = None
    prefixed: int = 0
    first_key: str | None = None


@dataclasses.dataclass(frozen=True)
class Read(Located):
    """A file the reader's code opened for reading that this run wrote (the scratch folder's
    copy), with its size when opened: a rank reading what another rank writes."""

    KIND: ClassVar[str] = "read"
    path: str
    size: int
