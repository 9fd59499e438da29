"""DDP's own collectives, in the same ledger as the script's (``ranks/watch/collectives.py``).

A DDP issues collectives the script never calls by name: at construction it all-gathers the
parameters' shapes (``_verify_param_shape_across_processes``) and broadcasts rank 0's
parameters and buffers (``_sync_module_states``); before each forward with buffers it
broadcasts rank 0's buffers (``_sync_buffers``, when ``broadcast_buffers=True``); each backward
after a synchronising forward all-reduces the gradient buckets (recorded by the backward's
watcher, ``ranks/watch/model.py``). A rank that runs one of them alone (an evaluation through
the DDP model on rank 0) meets a different collective on the other ranks; counting them with
the script's own is what lets the doctor name the first place the ranks disagree.

``torch.nn.parallel.distributed`` imports the two construction helpers by name, so they are
wrapped in that module; ``_sync_buffers`` is a method of DDP.
"""

from __future__ import annotations

import ddplab.doctor.records as records
from ddplab.doctor.ranks import patching, where
from ddplab.doctor.ranks import recorder as _recorder
from ddplab.doctor.ranks.watch.group import group_info, nccl_rules

SHAPE_CHECK, PARAMETERS, BUFFERS, GRADIENTS = (records.DdpCall.SHAPE_CHECK,
                                               records.DdpCall.PARAMETERS,
                                               records.DdpCall.BUFFERS, records.DdpCall.GRADIENTS)


def note(op: str, by: str, process_group, tensors, spot=None):
    """One of DDP's collectives, recorded as the script's are, with ``by`` saying whose."""
    rec = _recorder.RECORDER
    info = group_info(process_group)
    key = ",".join(map(str, info["ranks"])) if info["ranks"] else "world"
    spot = spot if spot is not None else where.line()
    first = tensors[0] if tensors else None
    record = rec.add(records.Collective(
        op=op, seq=None, group=key, **where.fields(spot),
        devices=sorted({t.device.type for t in tensors}),
        nccl=nccl_rules(info["requested"]), requested=info["requested"], reduce=None,
        dtype=str(first.dtype).replace("torch.", "") if first is not None else None,
        numel=sum(t.numel() for t in tensors), before=None,
        eval_samples=rec.counters.get("eval_samples", 0), p2p=False, by=str(by)))
    rec.to_ledger(record)
    return record


def install() -> None:
    import torch.distributed as dist
    import torch.nn.parallel.distributed as ddp_module

    def make_shape_check(real):
        def _verify_param_shape_across_processes(process_group, tensors, *args, **kwargs):
            if dist.is_initialized():
                note("all_gather", SHAPE_CHECK, process_group, list(tensors))
            return real(process_group, tensors, *args, **kwargs)
        return _verify_param_shape_across_processes

    def make_module_states(real):
        def _sync_module_states(module, process_group, *args, **kwargs):
            if dist.is_initialized():
                note("broadcast", PARAMETERS, process_group, list(module.parameters()))
            return real(module, process_group, *args, **kwargs)
        return _sync_module_states

    def make_sync_buffers(real):
        def _sync_buffers(self):
            if dist.is_initialized():
                note("broadcast", BUFFERS, self.process_group, list(self.modules_buffers))
            return real(self)
        return _sync_buffers

    patching.wrap(ddp_module, "_verify_param_shape_across_processes", make_shape_check)
    patching.wrap(ddp_module, "_sync_module_states", make_module_states)
    patching.wrap(ddp_module.DistributedDataParallel, "_sync_buffers", make_sync_buffers)
