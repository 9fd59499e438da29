"""A panel's kept results: each run's result and its drawn figure, keyed by every control's
value and the placement, the newest :data:`KEPT` (``screen.ahead`` fills it ahead of the
reader; a reader's own runs go in too, so a move back shows at once)."""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

KEPT = 64  # results a panel keeps (a PNG of 30-150 KB each)


@dataclass(frozen=True)
class Entry:
    """A real run of one panel's values: its result and its figure, as PNG."""

    result: object
    png: bytes
    run_s: float
    draw_s: float
    ahead: bool  # run ahead in the background, not by the reader's own move


def key_of(values: dict, where=None) -> tuple:
    """Every control's value, by name, and ``where`` (the placement the run went to), as a key
    (a value that cannot be hashed by its repr)."""
    key = [where]
    for name, value in values.items():
        try:
            hash(value)
        except TypeError:
            value = ("repr", repr(value))
        key.append((name, type(value).__name__, value))  # 1 and True and 1.0 stay apart
    return tuple(key)


class Kept:
    """The newest ``size`` entries by key; reads and writes from two threads."""

    def __init__(self, size: int = KEPT):
        self.size = size
        self._entries = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key) -> Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)  # shown again: kept longer
            return entry

    def put(self, key, entry: Entry) -> None:
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def __contains__(self, key) -> bool:
        with self._lock:
            return key in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
