"""Experiments: each module pairs rank functions (run on every rank) with a driver that calls
them through :func:`ddplab.run` and returns plain results for plots, tests and the CLI."""


def positive_int(name: str, value) -> None:
    """Reject anything but an int >= 1 (bools too) with a ValueError naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
