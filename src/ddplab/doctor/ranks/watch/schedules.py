"""Learning-rate schedules whose length is given (wrapped: torch has no hook for a scheduler's
construction or step): the length, the ``epochs`` and ``steps_per_epoch`` OneCycleLR was
given, and each ``step()``, counted with the optimizer steps taken meanwhile.

``schedule-length`` compares the length with the steps this rank's loader gives: a schedule
sized from ``len(dataset)`` on ranks that each see ``1 / world_size`` of it is never walked to
its end.
"""

from __future__ import annotations

import inspect

import ddplab.doctor.records as records
from ddplab.doctor.ranks import patching, where
from ddplab.doctor.ranks import recorder as _recorder

LENGTHS = {"OneCycleLR": "total_steps", "CosineAnnealingLR": "T_max",
           "PolynomialLR": "total_iters"}  # scheduler -> the attribute that holds its length


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def install() -> None:
    import torch.optim.lr_scheduler as schedulers

    def make_init(name: str, attribute: str):
        def make(real):
            signature = inspect.signature(real)

            def __init__(self, *args, **kwargs):
                real(self, *args, **kwargs)
                length = _int(getattr(self, attribute, None))
                if "_ddplab_doctor" in self.__dict__ or length is None:
                    return
                try:
                    given = signature.bind(self, *args, **kwargs).arguments
                except TypeError:
                    given = {}
                rec, spot = _recorder.RECORDER, where.line()
                self.__dict__["_ddplab_doctor"] = rec.count("schedule")
                rec.add(records.Schedule(
                    index=self._ddplab_doctor, type=name, **where.fields(spot),
                    length=length, length_name=attribute,
                    epochs=_int(given.get("epochs")),
                    steps_per_epoch=_int(given.get("steps_per_epoch")),
                    optimizer=getattr(self.optimizer, "_ddplab_doctor", None),
                    optimizer_steps_at_start=rec.steps))
            return __init__
        return make

    def make_step(real):
        def step(self, *args, **kwargs):
            index = self.__dict__.get("_ddplab_doctor")
            if index is not None:
                rec = _recorder.RECORDER
                kept = next((s for s in reversed(rec.records.get(records.Schedule.KIND, []))
                             if s.index == index), None)
                if kept is not None:
                    rec.update(kept, steps=kept.steps + 1,
                               optimizer_steps=rec.steps - kept.optimizer_steps_at_start)
            return real(self, *args, **kwargs)
        return step

    for name, attribute in LENGTHS.items():
        owner = getattr(schedulers, name, None)
        if owner is not None:
            patching.wrap(owner, "__init__", make_init(name, attribute))
    patching.wrap(schedulers.LRScheduler, "step", make_step)
