"""Input checks shared by every experiment: bad input is a ValueError naming the parameter,
raised in the caller before any rank starts.

Bools are refused where an int is asked for (``True`` is an ``int`` to Python, never a world
size to a reader).
"""

from __future__ import annotations


def an_int(name: str, value) -> int:
    """Any int, bools excluded (seeds, offsets)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    return value


def positive_int(name: str, value) -> int:
    """An int >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def int_at_least(name: str, value, low: int, why: str = "") -> int:
    """An int >= ``low``; ``why`` (in parentheses) says where the bound comes from."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        because = f" ({why})" if why else ""
        raise ValueError(f"{name} must be an int >= {low}{because}, got {value!r}")
    return value


def a_bool(name: str, value) -> bool:
    """True or False, nothing truthy in their place."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def int_in_range(name: str, value, low: int, high: int) -> int:
    """An int with ``low <= value <= high``."""
    an_int(name, value)
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value!r}")
    return value


def positive_number(name: str, value) -> float:
    """A finite int or float > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return value


def one_of(name: str, value, choices) -> object:
    """One of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value
