"""Replace a function on a module or class by a wrapper, once, remembering the original."""

from __future__ import annotations

import functools

ORIGINALS: dict[tuple[int, str], object] = {}


def wrap(owner, name: str, make_wrapper, layer: str = "") -> None:
    """``owner.name = make_wrapper(current)``; a second call for the same place and ``layer``
    does nothing (a forked child inherits its parent's wrappers). Two watchers that wrap one
    place give different layers; the one installed later is the outer one."""
    def wrapped(current):
        wrapper = make_wrapper(current)
        functools.update_wrapper(wrapper, current)
        return wrapper
    replace(owner, name, wrapped, layer)


def replace(owner, name: str, make, layer: str = "") -> None:
    """``owner.name = make(current)``, once per place and layer, as ``wrap`` but keeping what
    ``make`` gives as it is (a class in place of a class)."""
    key = (id(owner), name + (f"/{layer}" if layer else ""))
    if key in ORIGINALS:
        return
    current = getattr(owner, name)
    ORIGINALS[key] = current
    setattr(owner, name, make(current))


def original(owner, name: str):
    return ORIGINALS.get((id(owner), name), getattr(owner, name))
