"""What a failed call raises in the caller, and the hint for the most common cause."""

from __future__ import annotations

GUARD_HINT = (
    "If you started ddplab from a script, the script's top level runs again in every rank "
    "process: put it under `if __name__ == \"__main__\":`."
)


class RankError(RuntimeError):
    """A rank raised or died. The message names the rank and carries its traceback."""

    def __init__(self, message: str, rank: int, remote_traceback: str = ""):
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback
