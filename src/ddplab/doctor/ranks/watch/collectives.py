"""Every collective the script calls, in order, with its line (no hook exists: wrapped).

Only the names a script reaches through ``torch.distributed`` are wrapped, not the ones torch
calls inside (``all_gather_object`` calls ``all_gather`` inside ``distributed_c10d``): each of
the script's calls is seen once. DDP's own gradient all-reduces start in C++ and are not seen
here; the backward that waits for them is (``watch_model``).

Where the script asked for NCCL and runs on gloo, a gather follows NCCL's rule where the two
differ (``as_nccl``).

Each call is recorded with its group's sequence number, its tensors' devices, shapes and (for
a few numbers) values before and after, and the number of evaluation samples this rank drew
since its previous reduction: what ``collective-on-some-ranks``, ``cpu-tensor-nccl`` and
``metric-mean-of-means`` read.
"""

from __future__ import annotations

import inspect

import ddplab.doctor.records as records
from ddplab.doctor.ranks import patching, where
from ddplab.doctor.ranks import recorder as _recorder
from ddplab.doctor.ranks.cuda_on_cpu import device_type
from ddplab.doctor.ranks.cuda_on_cpu.marks import note
from ddplab.doctor.ranks.watch import gathered
from ddplab.doctor.ranks.watch.group import group_info, nccl_rules, used_backend
from ddplab.doctor.ranks.watch.model import MODELS, grad_name

COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce",
               "reduce_scatter", "reduce_scatter_tensor", "gather", "scatter", "all_to_all",
               "all_to_all_single", "barrier", "monitored_barrier", "all_gather_object",
               "broadcast_object_list", "gather_object", "scatter_object_list")
POINT_TO_POINT = ("send", "recv", "isend", "irecv")  # one side each, by design: not paired
REDUCTIONS = ("all_reduce", "reduce")
SMALL = 8  # tensors up to this many numbers have their values recorded


def tensors_of(value) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_of(item)]
    return []


def values(tensor):
    if tensor.numel() > SMALL:
        return None
    return [float(v) for v in tensor.detach().flatten().tolist()]


def as_nccl(name: str, signature, args, kwargs, requested):
    """The call's arguments as NCCL would take them, where gloo runs in its place.

    ``all_gather``: ``ProcessGroupNCCL::allgather`` (torch/csrc/distributed/c10d/
    ProcessGroupNCCL.cpp) checks that the input is one dense GPU tensor and that the outputs
    have one size, then gathers ``input.numel()`` elements into their flattened stack: the
    input's shape is never compared with theirs. ``ProcessGroupGloo::allgather`` refuses an
    output of another shape ("invalid tensor size at index 0 (expected (), got (1))"), so a
    0-dim tensor gathered into ``(1,)``-shaped outputs, which NCCL accepts, is reshaped to
    the outputs' shape (a view: the script's tensor is unchanged)."""
    import torch

    if name != "all_gather" or not nccl_rules(requested) or used_backend(requested) == requested:
        return args, kwargs
    bound = signature.bind(*args, **kwargs)
    outputs, tensor = bound.arguments.get("tensor_list"), bound.arguments.get("tensor")
    if not isinstance(tensor, torch.Tensor) or not outputs or not all(
            isinstance(o, torch.Tensor) for o in outputs):
        return args, kwargs
    shape = outputs[0].shape
    if (tensor.shape == shape or any(o.shape != shape for o in outputs)
            or tensor.numel() != outputs[0].numel()):
        return args, kwargs
    note("all_gather: input reshaped to its outputs' shape (NCCL counts elements)")
    bound.arguments["tensor"] = tensor.reshape(shape)
    return bound.args, bound.kwargs


def make_wrapper(name: str):
    def make(real):
        signature = inspect.signature(real)

        def doctor_collective(*args, **kwargs):
            import torch.distributed as dist

            rec = _recorder.RECORDER
            if not dist.is_initialized():
                return real(*args, **kwargs)
            bound = signature.bind_partial(*args, **kwargs).arguments
            group = bound.get("group")
            info = group_info(group)
            key = ",".join(map(str, info["ranks"])) if info["ranks"] else "world"
            tensors = [] if name.endswith("_object") or name.endswith("_object_list") else [
                t for arg, v in bound.items() if arg not in ("group", "op") for t in tensors_of(v)]
            first = tensors[0] if tensors else None
            spot = where.line()
            seq = rec.count(f"seq/{key}") if name not in POINT_TO_POINT else None
            record = rec.add(records.Collective(
                op=name, seq=seq, group=key, **where.fields(spot),
                devices=sorted({device_type(t) for t in tensors}),
                nccl=nccl_rules(info["requested"]),
                requested=None if info["requested"] is None else str(info["requested"]),
                reduce=str(bound.get("op", "")).split(".")[-1] or None,
                dtype=str(first.dtype).replace("torch.", "") if first is not None else None,
                numel=first.numel() if first is not None else None,
                before=values(first) if first is not None else None,
                eval_samples=rec.counters.get("eval_samples", 0), p2p=name in POINT_TO_POINT,
                grad_of=grad_name(first) if first is not None and MODELS else None))
            if name in REDUCTIONS:
                rec.counters["eval_samples"] = 0
            if seq is not None:
                rec.to_ledger(record)
            args, kwargs = as_nccl(name, signature, args, kwargs, info["requested"])
            with rec.blocking(name, spot, seq=seq):
                result = real(*args, **kwargs)
            if first is not None and not bound.get("async_op"):
                rec.update(record, after=values(first))
                if name == "all_gather":  # which samples the gathered rows are, when known
                    gathered.trace(bound.get("tensor_list"), bound.get("tensor"))
            return result
        return doctor_collective
    return make


def install() -> None:
    import torch.distributed as dist

    for name in COLLECTIVES + POINT_TO_POINT:
        if hasattr(dist, name):
            patching.wrap(dist, name, make_wrapper(name))
