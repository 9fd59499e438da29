"""Batches as a DataLoader yields them (a tensor, or tuples, lists and dicts of them, with
other values beside), measured, cut and joined along the batch dimension.

A batch can be cut and joined when every tensor in it has the same first dimension (its
size); anything else (a string, a number, a tensor of another first dimension) is kept from
the first batch joined: ragged or non-tensor parts are not replayed sample by sample.
"""

from __future__ import annotations


def _tensors(batch):
    import torch

    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, dict):
        for value in batch.values():
            yield from _tensors(value)
    elif isinstance(batch, (list, tuple)):
        for value in batch:
            yield from _tensors(value)


def size(batch) -> int | None:
    """The samples in ``batch``: the first dimension its tensors share, or None (no tensor,
    a 0-d tensor, or tensors that disagree: nothing to cut)."""
    sizes = {int(t.shape[0]) if t.dim() else None for t in _tensors(batch)}
    return sizes.pop() if len(sizes) == 1 else None


def detached(batch):
    """A copy of ``batch`` whose tensors are detached CPU clones (the script may change a
    batch in place after the loader yields it)."""
    return _map(batch, lambda t: t.detach().to("cpu", copy=True))


def cut(batch, start: int, stop: int, whole: int):
    """Samples ``start:stop`` of ``batch``: every tensor of first dimension ``whole`` sliced,
    everything else kept."""
    return _map(batch, lambda t: t[start:stop] if t.dim() and t.shape[0] == whole else t)


def join(batches: list):
    """One batch of ``batches`` one after the other (tensors concatenated on dimension 0; other
    parts from the first)."""
    import torch

    first = batches[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(batches) if first.dim() else first
    if isinstance(first, dict):
        return _rebuild(first, {k: join([b[k] for b in batches]) for k in first})
    if isinstance(first, (list, tuple)):
        parts = [join([b[i] for b in batches]) for i in range(len(first))]
        return _rebuild(first, parts)
    return first


def _map(batch, fn):
    import torch

    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        return _rebuild(batch, {k: _map(v, fn) for k, v in batch.items()})
    if isinstance(batch, (list, tuple)):
        return _rebuild(batch, [_map(v, fn) for v in batch])
    return batch


def _rebuild(like, parts):
    """``parts`` in the container type of ``like`` (a namedtuple, a dict subclass such as a
    tokenizer's BatchEncoding), or the plain type where that one cannot be built so."""
    if isinstance(like, dict):
        try:
            return type(like)(parts)
        except Exception:
            return dict(parts)
    if isinstance(like, tuple) and hasattr(like, "_fields"):
        return type(like)(*parts)
    try:
        return type(like)(parts)
    except Exception:
        return list(parts)
