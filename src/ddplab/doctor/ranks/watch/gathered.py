"""Which samples a gathered evaluation result holds when the script uses it.

An evaluation DistributedSampler pads its shards with repeated samples. Whether the repeats
reach the metric depends on what the script does after ``all_gather``: interleaving the ranks'
rows (sample i is on rank i mod world_size) and cutting to ``len(dataset)`` drops them exactly
(Accelerate's ``gather_for_metrics``); concatenating rank by rank and cutting keeps a repeat
and drops a real sample from 3 ranks on. The doctor follows the rows to tell them apart.

After an ``all_gather`` into a list, while an evaluation pass over a DistributedSampler is the
latest, each gathered tensor is swapped in the script's list for a view of the same storage
(``as_subclass``) that carries each element's sample index. Rearranging operations (cat,
stack, reshape, slicing, ...) are replayed on those indices; the first other operation
(``predictions == labels``, ``.tolist()``) is a use: its samples are recorded, and its result
is a plain tensor again, so the tracing ends there.
"""

from __future__ import annotations

import copy
import weakref

import ddplab.doctor.records as records
from ddplab.doctor.ranks import patching, where
from ddplab.doctor.ranks import recorder as _recorder

MAX_NUMEL = 1 << 22  # larger gathers are not followed: the indices cost 8 bytes an element
MAX_USES = 8  # uses recorded per process
SHOWN = 8  # repeated and missing samples named per use
SAMPLERS: dict[int, weakref.ref] = {}  # the data watcher's sampler index -> the sampler


def _rearranging():
    import torch

    T = torch.Tensor
    return {torch.cat, torch.concat, torch.concatenate, torch.stack, torch.hstack,
            torch.vstack, torch.flatten, torch.reshape, torch.narrow, torch.squeeze,
            torch.unsqueeze, torch.transpose, torch.permute, T.reshape, T.view, T.flatten,
            T.__getitem__, T.contiguous, T.clone, T.cpu, T.cuda, T.to, T.detach, T.t,
            T.transpose, T.permute, T.squeeze, T.unsqueeze, T.narrow, T.expand, T.repeat,
            T.__iter__, T.unbind, T.split, T.chunk, T.float, T.double, T.long, T.int}


def _swap(value, traced: bool):
    """``value`` with every traced tensor replaced by its indices (``traced``) or by a plain
    view of its data."""
    import torch

    if _is_traced(value):
        if traced:
            return value.__dict__["_ddplab_ids"]
        with torch._C.DisableTorchFunctionSubclass():
            return value.as_subclass(torch.Tensor)
    if isinstance(value, (list, tuple)):
        return type(value)(_swap(v, traced) for v in value)
    if isinstance(value, dict):
        return {k: _swap(v, traced) for k, v in value.items()}
    return value


def _plain_ids(value):
    """A plain tensor in a rearrangement beside traced ones holds no known sample: -1."""
    import torch

    if _is_traced(value):
        return value.__dict__["_ddplab_ids"]
    if isinstance(value, torch.Tensor):
        return torch.full(value.shape, -1, dtype=torch.long)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain_ids(v) for v in value)
    return value


def _wrap(result, ids, source):
    import torch

    if isinstance(result, torch.Tensor) and isinstance(ids, torch.Tensor) \
            and ids.shape == result.shape:
        with torch._C.DisableTorchFunctionSubclass():
            out = result.as_subclass(Traced)
        out.__dict__["_ddplab_ids"] = ids
        out.__dict__["_ddplab_source"] = source
        return out
    if isinstance(result, (list, tuple)) and isinstance(ids, (list, tuple)) \
            and len(result) == len(ids):
        return type(result)(_wrap(r, i, source) for r, i in zip(result, ids))
    return result


def _traced_in(value) -> list:
    if _is_traced(value):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _traced_in(v)]
    return []


def _note_use(func, args) -> None:
    import torch

    rec = _recorder.RECORDER
    if rec.counters.get("gathered_uses", 0) >= MAX_USES:
        return
    traced = _traced_in(list(args))
    if not traced:
        return
    rec.count("gathered_uses")
    first = traced[0]
    ids = first.__dict__["_ddplab_ids"].reshape(-1)
    source = first.__dict__["_ddplab_source"]
    known = ids[ids >= 0]
    counts = torch.bincount(known) if known.numel() else torch.zeros(0, dtype=torch.long)
    present = counts[counts > 0]
    per_sample = int(present.min()) if present.numel() else 1  # elements of one sample
    size = source["dataset_len"]
    samples = counts // per_sample
    repeated = [int(i) for i in torch.nonzero(samples > 1).reshape(-1)[:SHOWN]]
    missing = [i for i in range(size) if i >= len(samples) or samples[i] == 0][:SHOWN] \
        if size else []
    spot = where.line()
    rec.add(records.GatheredUse(
        how=getattr(func, "__name__", str(func)), **where.fields(spot),
        gather_file=source["file"], gather_line=source["line"],
        loader=source["loader"], pass_number=source["pass_number"], dataset_len=size,
        samples=int(samples.sum()), distinct=int((samples > 0).sum()),
        repeated=repeated, repeats={str(i): int(samples[i]) for i in repeated},
        missing=missing))


def _make_traced():
    import torch

    rearranging = _rearranging()

    class Traced(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            with torch._C.DisableTorchFunctionSubclass():
                result = func(*_swap(args, False), **_swap(kwargs, False))
            if func in rearranging:
                source = _traced_in(list(args) + list(kwargs.values()))[0].__dict__[
                    "_ddplab_source"]
                try:
                    with torch._C.DisableTorchFunctionSubclass():
                        ids = func(*_plain_ids(args), **_plain_ids(kwargs))
                except Exception:  # a dtype cast of the indices: they stay as they are
                    ids = _traced_in(list(args))[0].__dict__["_ddplab_ids"] \
                        if getattr(func, "__name__", "") in ("float", "double", "long", "int",
                                                               "to", "cpu", "cuda") else None
                return _wrap(result, ids, source)
            if isinstance(result, torch.Tensor) or getattr(func, "__name__", "") in (
                    "tolist", "numpy", "item"):
                _note_use(func, list(args) + list(kwargs.values()))
            return result
    return Traced


Traced = None  # the torch.Tensor subclass, made at the first gather (torch loads late)


def _is_traced(value) -> bool:
    return Traced is not None and isinstance(value, Traced)


def _batch_size(rec, loader: int):
    return next((d.batch_size for d in rec.records.get("loader", []) if d.index == loader),
                None)


def _sample_rows(tensor, rec):
    """Per rank, the sample index of each row of ``tensor`` (this rank's gathered result),
    from the latest evaluation pass over a DistributedSampler; None when unknown."""
    from torch.utils.data.distributed import DistributedSampler

    passes = {(p.loader, p.number): p for p in rec.records.get("pass", [])}
    for order in reversed(rec.records.get("sampler_order", [])):
        p = passes.get((order.loader, order.pass_number))
        if p is None:
            continue
        if p.training:
            return None, None
        sampler = SAMPLERS.get(order.sampler, lambda: None)()
        if sampler is None:
            return None, None
        if type(sampler).__iter__ is not DistributedSampler.__iter__:
            return None, None  # a subclass's own order: not recomputed here
        real_iter = patching.original(DistributedSampler, "__iter__")
        per_rank = []
        for r in range(order.num_replicas):
            other = copy.copy(sampler)
            other.rank = r
            per_rank.append(list(real_iter(other)))
        n = int(tensor.shape[0]) if tensor.dim() else 0
        size = _batch_size(rec, order.loader)
        if n == order.count:
            rows = per_rank
        elif size and p.batches and n <= size:
            start = (p.batches - 1) * size
            rows = [indices[start:start + n] for indices in per_rank]
        else:
            return None, None
        return rows, order
    return None, None


def trace(tensor_list, tensor) -> None:
    """After ``all_gather(tensor_list, tensor)``: swap the gathered tensors for traced views
    when their rows are known samples of an evaluation DistributedSampler."""
    import torch

    global Traced
    rec = _recorder.RECORDER
    if not isinstance(tensor_list, list) or not isinstance(tensor, torch.Tensor) \
            or not tensor.dim() or tensor.numel() * len(tensor_list) > MAX_NUMEL:
        return
    rows, order = _sample_rows(tensor, rec)
    if rows is None or len(rows) != len(tensor_list) or \
            any(len(r) != int(t.shape[0]) for r, t in zip(rows, tensor_list)):
        return
    if Traced is None:
        Traced = _make_traced()
    spot = where.line()
    source = {**where.fields(spot), "loader": order.loader,
              "pass_number": order.pass_number, "dataset_len": order.dataset_len}
    for i, (indices, t) in enumerate(zip(rows, tensor_list)):
        ids = torch.tensor(indices, dtype=torch.long).reshape(
            -1, *[1] * (t.dim() - 1)).expand(t.shape).contiguous()
        with torch._C.DisableTorchFunctionSubclass():
            view = t.as_subclass(Traced)
        view.__dict__["_ddplab_ids"] = ids
        view.__dict__["_ddplab_source"] = source
        tensor_list[i] = view
