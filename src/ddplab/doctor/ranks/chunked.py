"""What DDP computes, in one process: the forward of a batch joined from the N ranks' batches
runs on each rank's chunk separately and the outputs are joined, so that every layer that
mixes samples (BatchNorm's batch statistics) sees what that rank's replica saw.

BatchNorm's running statistics follow DDP too: each chunk starts from the same buffers (every
replica starts the step from rank 0's, ``broadcast_buffers``) and rank 0's chunk's result is
kept (DDP broadcasts rank 0's buffers before the next forward). A model with SyncBatchNorm runs
one forward over the whole batch: its statistics are over every rank's samples. A 0-d output
(a loss the model computes itself) is the mean of the chunks' values, as DDP averages the
ranks' gradients whatever their batch sizes. Outputs are joined through tuples, lists, dicts
and objects' attributes (a ``SimpleNamespace``, a dataclass); None stays None.
"""

from __future__ import annotations

import copy

from ddplab.doctor.reference import collate


def has_sync_batchnorm(module) -> bool:
    import torch.nn as nn

    return any(isinstance(m, nn.SyncBatchNorm) for m in module.modules())


def _outputs_joined(outputs: list):
    import torch

    first = outputs[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(outputs).mean(0) if first.dim() == 0 else torch.cat(outputs)
    if isinstance(first, dict):
        return collate._rebuild(first, {k: _outputs_joined([o[k] for o in outputs])
                                        for k in first})
    if isinstance(first, (list, tuple)):
        return collate._rebuild(first, [_outputs_joined([o[i] for o in outputs])
                                        for i in range(len(first))])
    if hasattr(first, "__dict__") and any(isinstance(v, torch.Tensor)
                                          for v in vars(first).values()):
        joined = copy.copy(first)  # a SimpleNamespace, a dataclass: its fields joined
        for name in vars(first):
            setattr(joined, name, _outputs_joined([getattr(o, name) for o in outputs]))
        return joined
    return first


def _buffers(module) -> list:
    """(owner, name) of every buffer that is a tensor."""
    return [(m, name) for m in module.modules() for name, b in m._buffers.items()
            if b is not None]


def _bind(places: list, tensors: list) -> None:
    """Each buffer rebound to a tensor of its own (not copied into: BatchNorm's backward holds
    the buffers of the forward it ran, and an in-place copy would change what it saved)."""
    for (owner, name), t in zip(places, tensors):
        owner._buffers[name] = t


def forward_in_chunks(module, chunks: list[int], args: tuple, kwargs: dict):
    """``module(*args, **kwargs)`` as the ranks ran it: each tensor argument whose first
    dimension is ``sum(chunks)`` cut into ``chunks``, one forward per chunk."""
    whole = sum(chunks)
    places = _buffers(module)
    start_state = [owner._buffers[name].detach().clone() for owner, name in places]
    rank0_state, outputs, start = None, [], 0
    for i, n in enumerate(chunks):
        if i:
            _bind(places, [t.clone() for t in start_state])
        a = collate.cut(list(args), start, start + n, whole)
        k = collate.cut(dict(kwargs), start, start + n, whole)
        outputs.append(module(*a, **k))
        if i == 0:
            rank0_state = [owner._buffers[name] for owner, name in places]
        start += n
    if len(chunks) > 1:
        _bind(places, rank0_state)
    return _outputs_joined(outputs)
