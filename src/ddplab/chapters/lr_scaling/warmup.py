"""A scaled learning rate with warmup, from torch's own schedulers.

The optimizer is built with the scaled rate, ``lr * factor`` (``factor``: the world size under
the linear rule). ``LinearLR(start_factor=1 / factor, total_iters=warmup_steps)`` starts at
``lr`` and adds a constant amount each step (``LinearLR.get_lr``,
``torch/optim/lr_scheduler.py``), which is Goyal et al.'s gradual warmup
(``lr_scaling.lr_schedule``); ``SequentialLR`` hands over to the schedule the script had at
step ``warmup_steps`` (it calls that scheduler's ``_update_lr(0)`` there: the schedule starts
from its own beginning, at the scaled rate). The page runs both and compares every step.
"""

from __future__ import annotations

import torch

from ddplab.common.checks import int_at_least, one_of, positive_int, positive_number

AFTER = ("constant", "cosine")


def scaled_lr_with_warmup(optimizer, warmup_steps: int, factor: float, schedule):
    """Warm up from ``lr`` to the optimizer's scaled rate ``lr * factor`` over ``warmup_steps``
    steps, then ``schedule`` (your scheduler, built on the same optimizer). Call
    ``scheduler.step()`` after each ``optimizer.step()``."""
    warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1 / factor,
                                               total_iters=warmup_steps)
    return torch.optim.lr_scheduler.SequentialLR(optimizer, [warmup, schedule],
                                                 milestones=[warmup_steps])


def rates(lr: float, world_size: int, warmup_steps: int, steps: int,
          after: str = "constant") -> list[float]:
    """The learning rate of each of ``steps`` steps: the linear rule (``lr * world_size``) with
    ``warmup_steps`` of warmup, then a constant rate or a cosine decay to 0 at ``steps``."""
    positive_number("lr", lr)
    positive_int("world_size", world_size)
    steps = positive_int("steps", steps)
    warmup_steps = int_at_least("warmup_steps", warmup_steps, 1)
    if warmup_steps >= steps:
        raise ValueError(f"warmup_steps must be below steps ({steps}), got {warmup_steps}")
    one_of("after", after, AFTER)
    weight = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=lr * world_size)  # the scaled rate
    schedule = (torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=0)
                if after == "constant" else
                torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps - warmup_steps))
    scheduler = scaled_lr_with_warmup(optimizer, warmup_steps, world_size, schedule)
    out = []
    for _ in range(steps):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()  # no gradient: a step that changes nothing, in the order a loop has
        scheduler.step()
    return out
