"""One timed training step, in seconds, the same for every chapter that times steps.

Every rank starts the step after a barrier and reads :func:`ddplab.common.clock.now` (which
waits for a GPU first) at its edges, while a hook on every parameter notes when autograd has
accumulated its gradient. DDP's all-reduces run beside backward, and ``loss.backward()``
returns only once the last of them has finished and its result is copied back
(``Reducer::finalize_backward`` in torch/csrc/distributed/c10d/reducer.cpp). So a step splits
into (:func:`phases`):

- **forward**: the forward pass and the loss;
- **backward**: from the end of forward to the last gradient: computing;
- **waiting**: from the last gradient to the end of ``backward()``: communication backward did
  not hide, and the copy of the averaged buckets back into ``.grad``; plus, where all-reduces
  block backward itself (naive data parallel), the time they held it;
- **optimizer**: ``optimizer.step()``.
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
