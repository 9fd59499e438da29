"""Replace a function on a module or class by a wrapper, once, remembering the original."""

from __future__ import annotations

import functools

ORIGINALS: dict[tuple[int, str], object] = {}


def wrap(owner, name: str, make_wrapper) -> None:
    """``owner.name = make_wrapper(original)``; a second call for the same place does nothing
    (a forked child inherits its parent's wrappers)."""
    key = (id(owner), name)
    if key in ORIGINALS:
        return
    original = getattr(owner, name)
    ORIGINALS[key] = original
    wrapper = make_wrapper(original)
    functools.update_wrapper(wrapper, original)
    setattr(owner, name, wrapper)


def original(owner, name: str):
    return ORIGINALS.get((id(owner), name), getattr(owner, name))
