"""What every experiment's result shares: plain JSON for the CLI, and ``describe()`` for pages,
labs and the terminal.

A result is a dataclass. ``to_json`` turns its fields (numpy arrays and scalars included) into
JSON lists and numbers; a result adds derived values by listing them in ``json_extras``.

Where its ranks ran (``backend`` and ``device``) is recorded when it is made, by the one
constructor a driver calls, ``Result.from_ranks(ranks, **fields)``: ``ranks`` is what
``ddplab.run`` returned (or another result, a hang watch's outcome, a ``Placement``, or lists
of these). It is not a dataclass field, so no result's fields change; ``to_json`` puts it
first, and :func:`placement_text` gives "gloo on cpu, 4 ranks" for a figure.
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


class Placed:
    """Knows where its ranks ran: ``backend`` and ``device`` of its ``placement``
    (``engine.placement.Placement``, or None where no ranks ran)."""

    placement = None

    @property
    def backend(self) -> str | None:
        return None if self.placement is None else self.placement.backend

    @property
    def device(self) -> str | None:
        return None if self.placement is None else self.placement.device


class Result(Placed):
    """Mixin for result dataclasses: ``to_json()`` gives where the ranks ran, every field, then
    each name in ``json_extras`` (a property or a method without arguments), under that name.
    A result that shapes its JSON otherwise overrides :meth:`json_fields`, not ``to_json``."""

    json_extras: tuple = ()

    @classmethod
    def from_ranks(cls, ranks, /, *args, **fields):
        """``cls(*args, **fields)``, recording where ``ranks`` ran: what ``ddplab.run``
        returned, another result, a hang watch's outcome, a ``Placement`` itself, or lists,
        tuples and dicts of these (a sweep's runs). Runs on different placements are a
        ValueError: a curve over world sizes must not divide a CPU run by a GPU run."""
        found = set(placements_of(ranks))
        if len(found) > 1:
            raise ValueError(f"{cls.__name__} would mix runs on "
                             f"{' and '.join(sorted(map(str, found)))}: run them on one "
                             "placement (the same backend and device)")
        result = cls(*args, **fields)
        object.__setattr__(result, "placement", found.pop() if found else None)  # frozen too
        return result

    def placement_json(self) -> dict:
        """``{"backend": ..., "device": ...}``, or ``{}`` where no ranks ran."""
        return {} if self.placement is None else {"backend": self.backend,
                                                  "device": self.device}

    def to_json(self) -> dict:
        return {**self.placement_json(), **self.json_fields()}

    def json_fields(self) -> dict:
        """Every field, then each name in ``json_extras``."""
        data = {f.name: to_json(getattr(self, f.name)) for f in dataclasses.fields(self)}
        for name in self.json_extras:
            value = getattr(self, name)
            data[name] = to_json(value() if callable(value) else value)
        return data

    def describe(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no describe()")


def placements_of(source):
    """Every placement recorded in ``source`` (see ``Result.from_ranks``), flattened."""
    if hasattr(source, "placement"):
        if source.placement is not None:
            yield source.placement
    elif hasattr(source, "backend") and hasattr(source, "device"):  # a Placement itself
        yield source
    elif isinstance(source, dict):
        for value in source.values():
            yield from placements_of(value)
    elif isinstance(source, (list, tuple)):
        for value in source:
            yield from placements_of(value)


def placement_text(result, world_size: int | None = None) -> str:
    """Where ``result``'s ranks ran, for a figure's title or corner: "gloo on cpu, 4 ranks"
    (``world_size`` defaults to the result's own, where it has one); "" when not recorded."""
    placement = getattr(result, "placement", None)
    if placement is None:
        return ""
    if world_size is None:
        world_size = getattr(result, "world_size", None)
    return placement.describe(world_size if isinstance(world_size, int) else None)
