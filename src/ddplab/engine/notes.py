"""The notes ranks write to their logs, and how the caller reads them back: one line each,
``ddplab-note `` then a JSON object with the call's id, the rank and the note's fields.

A rank that hangs returns nothing and never writes into a cell, so a note in its log is how the
caller learns how far it got (``hang_watch.run_watched``), where it waits while it still hangs
(``screen.while_running``), or which lines it printed during one call (``training_loop
.printing``). Both sides use this module: the rank writes with :func:`note`, the caller reads
with :func:`parse`, :func:`of_call` and :func:`where`. It imports no torch, so that the
kernel's ticking thread can read notes without loading it.

What a note may say about where a rank is (read by :func:`where`):
``waiting`` (the call it waits in, noted before it: ``hang_watch.watch_ddp`` and
``hang_watch.finish``), ``step`` (a step it finished), ``stopped_at`` (the step at which it left
its loop) and ``check_in`` (its check-in's message, None when it passed).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

NOTE = "ddplab-note "  # how a note's line starts in a rank's log


def line(call_id: str, rank: int, **fields) -> str:
    """The log line of one note."""
    return NOTE + json.dumps({"call": call_id, "rank": rank, **fields})


def note(call_id: str, rank: int, **fields) -> None:
    """On a rank: one line in its log that the caller reads back, even if the rank then
    hangs (a rank's output goes to its log, never to a cell)."""
    print(line(call_id, rank, **fields), flush=True)


def parse(text: str) -> dict | None:
    """The fields of a note's line; None for any other line, and for a note still being
    written (the logs are read while ranks run)."""
    if not text.startswith(NOTE):
        return None
    try:
        return json.loads(text[len(NOTE):])
    except ValueError:
        return None


def in_text(text: str) -> Iterator[dict]:
    """Every complete note in a log's text, in its order."""
    for text_line in text.splitlines():
        entry = parse(text_line)
        if entry is not None:
            yield entry


def of_call(logs: Iterable[str], call_id: str, world_size: int) -> list[list[dict]]:
    """Per rank (below ``world_size``), the notes of call ``call_id`` in ``logs`` (the ranks'
    log texts: a log holds every earlier call's notes too)."""
    notes: list[list[dict]] = [[] for _ in range(world_size)]
    for text in logs:
        for entry in in_text(text):
            if entry.get("call") == call_id and 0 <= entry.get("rank", -1) < world_size:
                notes[entry["rank"]].append(entry)
    return notes


def position(entry: dict) -> str | None:
    """Where the rank that wrote ``entry`` is, in words; None for a note that does not say."""
    if "waiting" in entry:
        return f"waits in {entry['waiting']}"
    if "check_in" in entry:
        message = entry["check_in"]
        return "passed the check-in" if message is None else f"check-in: {message}"
    if "stopped_at" in entry:
        return f"left the loop at step {entry['stopped_at']}"
    if "step" in entry:
        return f"finished step {entry['step']}"
    return None


def states(entries: Iterable[dict]) -> dict[int, str]:
    """Where each rank is, by its last note that says so."""
    found = {}
    for entry in entries:
        state = position(entry)
        if state is not None:
            found[entry["rank"]] = state
    return found
