"""Schedules: ``schedule-length``, a learning-rate schedule whose length (OneCycleLR's
``total_steps``, a cosine's ``T_max``) is sized from the whole dataset while each rank's
loader gives ``1 / world_size`` of it, so the ranks walk only that part of the schedule.

An error needs this run's proof: the scheduler stepped once per optimizer step, the epochs the
script runs (OneCycleLR's ``epochs``, or the training loader's passes in a run that finished),
this rank's loader's batches per epoch (its ``len()``, what a whole epoch gives, not the
doctor's capped count) and a length equal to the epochs times the steps of the whole dataset.
A longer schedule the doctor cannot trace to the dataset is not judged (a script may stop
early on purpose).
"""

from __future__ import annotations

import dataclasses

import ddplab.doctor.records as records
from ddplab.doctor.judging.check import Check
from ddplab.doctor.judging.findings import place
from ddplab.doctor.judging.judgement import (
    Problem,
    file_line,
    found,
    not_applicable,
    number,
    passed,
)

WALKED = 0.75  # at most this part of the schedule walked: a quarter or more never reached


@dataclasses.dataclass(frozen=True)
class Walk:
    """How far one rank walks one schedule: ``per_epoch`` optimizer steps a whole epoch of its
    loader gives (``batches / micro``), for ``epochs`` epochs; ``whole`` the steps an epoch of
    the whole dataset gives one process."""

    schedule: records.Schedule
    batches: int
    micro: int
    epochs: int | None
    counted: bool  # epochs counted from the loader's passes, not given to the scheduler
    whole: float | None
    uncounted: str | None = None  # why ``epochs`` is None

    @property
    def per_epoch(self) -> float:
        return self.batches / self.micro

    @property
    def walked(self) -> float | None:
        return None if self.epochs is None else self.epochs * self.per_epoch


def _walk(evidence, rank: int, schedule: records.Schedule, loader: records.Loader):
    """Rank ``rank``'s walk of ``schedule``, or why it cannot be told."""
    if schedule.steps < 2 or abs(schedule.steps - schedule.optimizer_steps) > 1:
        return (f"the {schedule.type} is not stepped once per optimizer step ({schedule.steps} "
                f"step() calls, {schedule.optimizer_steps} optimizer steps)")
    passes = [p for p in evidence.training_passes(rank) if p.loader == loader.index]
    steps = len(evidence.records(records.Step, rank))
    batches = sum(p.batches for p in passes)
    if not passes or passes[0].len is None or not steps or batches % steps:
        return "the training loader has no length, or its batches per step are not whole"
    every = [p for p in evidence.records(records.Pass, rank) if p.loader == loader.index]
    finished = evidence.outcome(rank) == records.Outcome.FINISHED
    epochs, counted = schedule.epochs, False
    untrained = [p for p in every if not (p.training or p.ended)]
    if epochs is None and finished and not untrained:
        epochs, counted = loader.iterations, True
    uncounted = None if epochs is not None else (
        "the run did not finish" if not finished else
        f"the training loader also ran {len(untrained)} pass{'es' * (len(untrained) > 1)} with "
        "no backward, an evaluation over it: its passes are not all epochs")
    whole = (loader.dataset_len / (loader.batch_size * batches // steps)
             if loader.dataset_len and loader.batch_size else None)
    return Walk(schedule, passes[0].len, batches // steps, epochs, counted, whole, uncounted)


def _sized_from_dataset(walk: Walk) -> bool:
    """The length is the epochs times the steps of the whole dataset (rounded either way)."""
    s = walk.schedule
    if walk.whole is None or walk.epochs is None or walk.per_epoch > WALKED * walk.whole:
        return False
    if s.steps_per_epoch is not None:
        return abs(s.steps_per_epoch - walk.whole) <= 1
    return abs(s.length - walk.epochs * walk.whole) <= walk.epochs + 1


def schedule_length(evidence, earlier):
    if (evidence.world_size or 0) < 2:
        return not_applicable("one rank")
    schedules = evidence.records(records.Schedule)
    if not schedules:
        return not_applicable("no scheduler whose length is given (OneCycleLR, "
                              "CosineAnnealingLR, PolynomialLR)")
    used = sorted({p.loader for p in evidence.training_passes()})
    if len(used) != 1:
        return not_applicable(f"{len(used)} training DataLoaders: which one the schedule "
                              "follows cannot be told")
    whys, walked = [], False
    for schedule in schedules:
        walks = {}
        for rank in evidence.ranks:
            mine = next((s for s in evidence.records(records.Schedule, rank)
                         if s.index == schedule.index), None)
            loader = evidence.loader(used[0], rank)
            walks[rank] = (_walk(evidence, rank, mine, loader) if mine and loader
                           else "no record of it on this rank")
        told = {r: w for r, w in walks.items() if isinstance(w, Walk)}
        if len(told) < len(walks):
            whys.append(next(w for w in walks.values() if isinstance(w, str)))
            continue
        most = max(told.values(), key=lambda w: w.walked or 0)
        if most.walked is None:
            whys.append(f"the script's epochs could not be counted ({most.uncounted})")
            continue
        if most.walked > WALKED * schedule.length:
            walked = True
            whys.append(f"the {schedule.type} of {schedule.length} steps is walked "
                        f"{number(most.walked)} steps")
            continue
        if not all(_sized_from_dataset(w) for w in told.values()):
            whys.append(f"the {schedule.type} of {schedule.length} steps is longer than the "
                        f"{number(most.walked)} steps walked, but not sized from the dataset: "
                        "not judged")
            continue
        loader = evidence.loader(used[0])
        return found(_problem(schedule, most, told, loader, evidence.world_size))
    return (passed if walked else not_applicable)("; ".join(whys))


def _problem(schedule: records.Schedule, walk: Walk, walks: dict, loader: records.Loader,
             world_size: int) -> Problem:
    micro = f" / {walk.micro} micro-steps" if walk.micro > 1 else ""
    given = (f"steps_per_epoch={schedule.steps_per_epoch} x epochs={walk.epochs}"
             if schedule.steps_per_epoch is not None else
             f"{schedule.length_name}={schedule.length}")
    share = number(walk.walked / schedule.length)
    return Problem(
        f"the {schedule.type} made at {place(*file_line(schedule))} is sized for "
        f"{schedule.length} steps ({given}): {walk.epochs} epochs of the whole dataset "
        f"({loader.dataset_len} samples / batch_size {loader.batch_size}{micro} = "
        f"{number(walk.whole)} steps each), but "
        + (f"each rank's loader gives {walk.batches} batches per epoch"
           if len({w.batches for w in walks.values()}) == 1 else
           "the ranks' loaders give " + ", ".join(
               f"rank {r} {w.batches}" for r, w in sorted(walks.items())) + " batches per epoch")
        + f" (its share of the dataset), so the {walk.epochs} epochs"
        + (" the script ran" if walk.counted else "")
        + f" walk {number(walk.walked)} of its {schedule.length} steps ({share} of the "
          "schedule): the learning rate never reaches the end of its schedule",
        {"length": schedule.length, "length_name": schedule.length_name,
         "epochs": walk.epochs, "epochs_counted": walk.counted,
         "batches_per_epoch": {r: w.batches for r, w in walks.items()},
         "micro_steps": walk.micro, "walked": {r: w.walked for r, w in walks.items()},
         "whole_dataset_steps_per_epoch": walk.whole, "dataset_len": loader.dataset_len,
         "batch_size": loader.batch_size, "world_size": world_size},
        *file_line(schedule))


FIX_LENGTH = """\
# len(train_loader): this rank's batches, len(dataset) / world_size / batch_size
scheduler = torch.optim.lr_scheduler.OneCycleLR(
    optimizer, max_lr, epochs=epochs, steps_per_epoch=len(train_loader))
# with k micro-steps per optimizer step: steps_per_epoch=len(train_loader) // k"""


SCHEDULE_LENGTH = Check(
    "schedule-length", "error",
    "a learning-rate schedule's length is the steps each rank's loader gives, not the "
    "whole dataset's",
    "lr-scaling-schedule-length",
    FIX_LENGTH, schedule_length)
