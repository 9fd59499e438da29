"""What every experiment's result shares: plain JSON for the CLI, and ``describe()`` for pages,
labs and the terminal.

A result is a dataclass. ``to_json`` turns its fields (numpy arrays and scalars included) into
JSON lists and numbers; a result adds derived values by listing them in ``json_extras``.
"""

from __future__ import annotations

import dataclasses

import numpy as np


def to_json(value):
    """Dataclasses, dicts, lists, numpy arrays and scalars as plain JSON-ready Python."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if hasattr(value, "to_json"):
            return to_json(value.to_json())
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


class Result:
    """Mixin for result dataclasses: ``to_json()`` gives every field, then each name in
    ``json_extras`` (a property or a method without arguments), under that name."""

    json_extras: tuple = ()

    def to_json(self) -> dict:
        data = {f.name: to_json(getattr(self, f.name)) for f in dataclasses.fields(self)}
        for name in self.json_extras:
            value = getattr(self, name)
            data[name] = to_json(value() if callable(value) else value)
        return data

    def describe(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no describe()")
