"""One timed training step, in seconds, the same for every chapter that times steps.

**A step** is one rank's time from a barrier that every rank passes to the end of its
``optimizer.step()``, read on :func:`ddplab.common.clock.now` (which waits for a GPU's queued
work first, so a CUDA rank times its kernels, not their launches). **The step of an
iteration** is its slowest rank's (:func:`slowest`): DDP's all-reduce makes every rank wait for
that one. **A run's step** is the median over its timed iterations of those (:func:`median_step`:
the middle one, upper middle for an even count), and **its phases** are that same step's, so
they add up to it exactly.

:func:`timed_step` splits a plain SGD step on the mean squared error into (:func:`phases`):

- **forward**: the forward pass and the loss;
- **backward**: from the end of forward to the last gradient: computing;
- **waiting**: from the last gradient to the end of ``backward()``: communication backward did
  not hide, and the copy of the averaged buckets back into ``.grad`` (``loss.backward()``
  returns only once the last all-reduce has finished, ``Reducer::finalize_backward`` in
  torch/csrc/distributed/c10d/reducer.cpp); plus, where all-reduces block backward itself
  (naive data parallel), the time they held it;
- **optimizer**: ``optimizer.step()``.

A step that is not one forward and one backward (``k`` micro-batches, a sharded optimizer's
step) is timed whole by :func:`timed`: the same barrier, the same clock, only ``step``.
"""

from __future__ import annotations

import torch.distributed as dist
import torch.nn.functional as F

from ddplab.common.clock import now

PHASES = ("forward", "backward", "waiting", "optimizer")


class GradientTimes:
    """``ready``: ``(parameter name, seconds)`` as autograd accumulates each gradient; with
    ``record=False`` no hook at all (``ready`` stays empty)."""

    def __init__(self, model, device, record: bool = True):
        self.device = device
        self.ready = []
        for name, param in model.named_parameters() if record else ():
            param.register_post_accumulate_grad_hook(
                lambda _, name=name: self.ready.append((name, now(self.device))))


def timed(step, device, *args) -> dict:
    """``step(*args)`` (a whole training step) after a barrier: ``{"step": seconds}``."""
    dist.barrier()  # every rank starts the step together
    start = now(device)
    step(*args)
    return {"step": now(device) - start}


def timed_step(wrapped, optimizer, X, y, gradients: GradientTimes) -> dict:
    """One SGD step on the mean squared error, after a barrier: its timestamps
    in seconds (``start``, ``forward_end``, ``backward_end``, ``step_end``)
    and ``ready``."""
    optimizer.zero_grad()
    gradients.ready = []
    dist.barrier()  # every rank starts the step together
    device = gradients.device
    start = now(device)
    loss = F.mse_loss(wrapped(X), y)
    forward_end = now(device)
    loss.backward()
    backward_end = now(device)
    optimizer.step()
    step_end = now(device)
    return {"start": start, "forward_end": forward_end,
            "backward_end": backward_end, "step_end": step_end,
            "ready": gradients.ready}


def last_gradient(stamps: dict) -> float:
    """When the last gradient was ready (the end of backward without a hook)."""
    return max((t for _, t in stamps["ready"]), default=stamps["backward_end"])


def phases(stamps: dict, blocked_s: float = 0.0) -> dict:
    """Seconds of each phase of :data:`PHASES` and ``step``; ``blocked_s``: time that
    all-reduces held backward up before its last gradient (moved from backward to waiting)."""
    last = last_gradient(stamps)
    return {"forward": stamps["forward_end"] - stamps["start"],
            "backward": last - stamps["forward_end"] - blocked_s,
            "waiting": stamps["backward_end"] - last + blocked_s,
            "optimizer": stamps["step_end"] - stamps["backward_end"],
            "step": stamps["step_end"] - stamps["start"]}


# ---------------------------------------------------------------- in the caller


def slowest(iteration: list[dict]) -> dict:
    """Of one iteration's records (one per rank, each with ``step``), the slowest rank's."""
    return max(iteration, key=lambda record: record["step"])


def slowest_steps(ranks: list[list[dict]]) -> list[float]:
    """Per iteration, the step in seconds (the slowest rank's); ``ranks``: per rank, per
    iteration, a record with ``step``."""
    return [slowest(iteration)["step"] for iteration in zip(*ranks, strict=True)]


def middle(steps: list[float]) -> float:
    """The median of a run's steps as :func:`median_iteration` picks it: the middle one, the
    upper middle for an even count (a step that was measured, never an average of two)."""
    return sorted(steps)[len(steps) // 2]


def median_iteration(ranks: list[list[dict]]) -> int:
    """The iteration whose step is the median (the upper middle one for an even count)."""
    steps = slowest_steps(ranks)
    return sorted(range(len(steps)), key=steps.__getitem__)[len(steps) // 2]


def median_step(ranks: list[list[dict]]) -> dict:
    """The run's step: the slowest rank's record at :func:`median_iteration`; its phases add
    up to its ``step``."""
    i = median_iteration(ranks)
    return slowest([r[i] for r in ranks])


def table(runs: dict) -> str:
    """Runs' steps side by side, in ms: a row per run (``runs``: its label -> the run, whose
    ``median(phase)`` gives the seconds of its step and of each of ``PHASES``, as
    :func:`median_step` gives them), a column per phase."""
    columns = ("step", *PHASES)
    width = max(len(label) for label in ("in ms", *runs))
    lines = [f"{'in ms':<{width}}" + "".join(f"{c:>11}" for c in columns)]
    lines += [f"{label:<{width}}" + "".join(f"{1e3 * run.median(c):11.1f}" for c in columns)
              for label, run in runs.items()]
    return "\n".join(lines)
