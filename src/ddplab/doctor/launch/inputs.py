"""Bad input, refused before any rank starts: a missing file, a folder, a file Python cannot
compile, numbers out of range."""

from __future__ import annotations

import os


class BadInput(ValueError):
    """Exit status 2, before any process starts."""


def check_script(path: str) -> str:
    if not os.path.exists(path):
        raise BadInput(f"{path}: no such file")
    if os.path.isdir(path):
        raise BadInput(f"{path} is a folder; give the training script itself (train.py)")
    try:
        with open(path, "rb") as f:
            source = f.read()
        compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise BadInput(f"{path}:{exc.lineno}: {exc.msg} (the script does not compile)") from None
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: cannot be read as Python ({exc})") from None
    return path


def check_numbers(world_size: int, steps: int, timeout: float) -> None:
    from ddplab.common.checks import int_in_range, positive_int, positive_number

    int_in_range("world_size", world_size, 1, 64)
    positive_int("steps", steps)
    positive_number("timeout", timeout)
