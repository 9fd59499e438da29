"""What a doctor's run is asked to do, stated once: the doctor's own process builds it from the
command line, and every rank reads it back from one environment variable.

Defaults live here and nowhere else; a watcher reads ``Settings.current()``, never a variable
of its own.
"""

from __future__ import annotations

import dataclasses
import json
import os

from ddplab.engine.torchrun import under_torchrun

VARIABLE = "DDPLAB_DOCTOR_SETTINGS"  # the settings as JSON, in every process of a run
LOCAL_WORLD_SIZE = 2  # ranks on this machine when torchrun did not start us


@dataclasses.dataclass(frozen=True)
class Settings:
    world_size: int = LOCAL_WORLD_SIZE
    steps: int = 8  # optimizer steps before every rank stops
    batches: int = 4  # training batches per epoch the run goes through
    timeout: float = 60.0  # seconds a rank may wait in one call before it is a hang
    role: str = "rank"  # "probe": one rank, stopped before its first optimizer step;
    # "reference": one rank, fed the N ranks' recorded batches (``doctor/reference``)
    record: str | None = None  # the reference folder the runs record to (None: nothing kept)

    @property
    def one_process(self) -> bool:
        """A run of one rank whatever the world size asked: the probe, the reference run."""
        return self.role in ("probe", "reference")

    def environment(self) -> dict[str, str]:
        """The variable that carries these settings to a rank."""
        return {VARIABLE: json.dumps(dataclasses.asdict(self))}

    @classmethod
    def current(cls) -> Settings:
        """This process's settings (the defaults where no doctor started it)."""
        text = os.environ.get(VARIABLE)
        return cls(**json.loads(text)) if text else cls()


DEFAULTS = Settings()


def world_size_for(asked: int | None) -> int:
    """The ranks of a run: torchrun's ``WORLD_SIZE`` where torchrun started us, else what the
    reader asked for, else two."""
    if under_torchrun():
        return int(os.environ["WORLD_SIZE"])
    return asked or LOCAL_WORLD_SIZE
