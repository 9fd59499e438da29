"""The model: DDP's construction, its forwards (with their ``require_backward_grad_sync``),
the backwards, the parameters a backward reaches, and state dicts loaded.

torch's global module hooks (``register_module_forward_pre_hook`` / ``_hook``) see every
forward; DDP's constructor, ``torch.autograd.backward`` (``Tensor.backward`` calls it) and
``Module.load_state_dict`` have no hook and are wrapped.
"""

from __future__ import annotations

import weakref

import ddplab.doctor.records as records
from ddplab.doctor.ranks import patching, where
from ddplab.doctor.ranks import recorder as _recorder
from ddplab.doctor.ranks.cuda_on_cpu import device_type
from ddplab.doctor.ranks.digest import tensor_hash
from ddplab.doctor.ranks.watch import ddp_collectives
from ddplab.doctor.ranks.watch.group import group_info, nccl_rules

MODELS: dict[int, dict] = {}  # DDP index -> {"ddp": weakref, "names": {id(param): name}}
ROOTS: dict[int, dict] = {}  # id(module) -> {"index", "ref", "kind"}: modules run at top level
UNUSED_CHECKS = 3  # backwards whose graph is walked for the parameters it reaches
SCALING = ("DivBackward0", "DivBackward1", "MulBackward0", "MulBackward1")


def loss_chain(loss) -> dict:
    """The constant factors between the loss given to backward and the computation under it:
    ``loss / 4`` gives factor 0.25; a GradScaler's scale is left out (``RECORDER.last_scale``)."""
    import torch

    factor, steps, node = 1.0, [], getattr(loss, "grad_fn", None)
    scale = getattr(_recorder.RECORDER, "last_scale", None)
    while node is not None and node.name() in SCALING:
        other = getattr(node, "_saved_other", None)
        inputs = node.next_functions
        if not (isinstance(other, torch.Tensor) and other.numel() == 1
                and (len(inputs) < 2 or inputs[1][0] is None)):
            break
        value = float(other)
        if node.name().startswith("Div"):
            factor, text = factor / value, f"/ {value:g}"
        elif scale is not None and value == scale:
            text = "x GradScaler's scale"
        else:
            factor, text = factor * value, f"x {value:g}"
        steps.append(text)
        node = inputs[0][0]
    return {"factor": factor, "ops": steps, "under": node.name() if node is not None else None}


def reached(tensors) -> set[int]:
    """ids of the leaf tensors (parameters) a backward from ``tensors`` reaches."""
    seen, found = set(), set()
    todo = [t.grad_fn for t in tensors if getattr(t, "grad_fn", None) is not None]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)
        if variable is not None:
            found.add(id(variable))
        todo.extend(next_node for next_node, _ in node.next_functions)
    return found


def _ddp_index(module):
    return module.__dict__.get("_ddplab_doctor")


def _value(loss) -> float | None:
    """The loss as a number (what a script's ``loss.item()`` gives), where it is one."""
    try:
        return float(loss.detach()) if loss.numel() == 1 else None
    except Exception:
        return None


def install() -> None:
    import torch
    from torch.nn.modules import module as module_hooks
    from torch.nn.parallel import DistributedDataParallel

    def make_ddp_init(real):
        def __init__(self, module, *args, **kwargs):
            rec = _recorder.RECORDER
            spot = where.line()
            devices = sorted({device_type(p) for p in module.parameters()})
            with rec.blocking("DistributedDataParallel(...)", spot):
                real(self, module, *args, **kwargs)
            index = rec.count("ddp")
            self.__dict__["_ddplab_doctor"] = index
            MODELS[index] = {"ddp": weakref.ref(self),
                             "names": {id(p): n for n, p in module.named_parameters()}}
            requested = group_info(getattr(self, "process_group", None))["requested"]
            params = [p for p in module.parameters() if p.requires_grad]
            rec.add(records.Ddp(
                index=index, **where.fields(spot),
                find_unused=bool(self.find_unused_parameters),
                broadcast_buffers=bool(self.broadcast_buffers),
                static_graph=bool(getattr(self, "static_graph", False)), devices=devices,
                nccl=nccl_rules(requested),
                requested=None if requested is None else str(requested), params=len(params),
                numel=sum(p.numel() for p in params),
                bytes=sum(p.numel() * p.element_size() for p in params),
                buffers=sum(1 for _ in module.buffers()), module=type(module).__name__))
        return __init__

    depth = [0]

    def before(module, args):
        rec = _recorder.RECORDER
        if depth[0] == 0:
            _note_root(module, rec)
        depth[0] += 1
        index = _ddp_index(module)
        if index is not None:
            first = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if torch.is_grad_enabled():
                size = (int(first.shape[0]) if first is not None and first.dim()
                        else rec.counters.get("last_batch"))  # model(**batch): the loader's
                sync = bool(module.require_backward_grad_sync)
                rec.micro.append(records.MicroStep(
                    ddp=index, sync=sync, batch=size,
                    digest=tensor_hash(first) if first is not None else None))
                rec.forwarded.add(index)
                if sync:
                    rec.synced.add(index)
            if rec.waiting is None:
                rec.waiting = {"what": "DDP forward", "since": _now()}
                rec.counters["ddp_forward_wait"] = 1

    def after(module, args, output):
        rec = _recorder.RECORDER
        depth[0] = max(0, depth[0] - 1)
        if _ddp_index(module) is not None and rec.counters.pop("ddp_forward_wait", 0):
            rec.waiting = None

    def make_backward(real):
        def backward(tensors, *args, **kwargs):
            rec = _recorder.RECORDER
            spot = where.line()
            as_list = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
            chain = loss_chain(as_list[0]) if len(as_list) == 1 else None
            reach = None
            if rec.forwarded and rec.counters.get("unused_checks", 0) < UNUSED_CHECKS:
                rec.counters["unused_checks"] = rec.counters.get("unused_checks", 0) + 1
                reach = reached(as_list)
            for index in sorted(rec.synced):  # DDP all-reduces the gradients in this backward
                model = MODELS.get(index)
                ddp = model["ddp"]() if model else None
                if ddp is not None:
                    ddp_collectives.note("all_reduce", ddp_collectives.GRADIENTS,
                                         ddp.process_group, [p for p in ddp.module.parameters()
                                                             if p.requires_grad], spot)
            rec.synced.clear()
            with rec.blocking("backward", spot):
                result = real(tensors, *args, **kwargs)
            rec.backwards += 1
            rec.pending.append(records.Backward(
                **where.fields(spot),
                value=_value(as_list[0]) if len(as_list) == 1 else None,
                **(chain or {"factor": None, "ops": [], "under": None})))
            if reach is not None:
                for index in sorted(rec.forwarded):
                    _note_unused(index, reach, rec)
            rec.forwarded.clear()
            return result
        return backward

    def make_load(real):
        def load_state_dict(self, *args, **kwargs):
            rec = _recorder.RECORDER
            spot = where.line()
            wrapped = any(m["ddp"]() is self or getattr(m["ddp"](), "module", None) is self
                          for m in MODELS.values())
            if spot is not None:
                rec.add(records.LoadStateDict(file=spot[0], line=spot[1],
                                              module=type(self).__name__,
                                              after_wrap=bool(MODELS), wrapped=wrapped))
            return real(self, *args, **kwargs)
        return load_state_dict

    rec = _recorder.RECORDER
    rec.micro, rec.pending, rec.forwarded, rec.synced = [], [], set(), set()
    patching.wrap(DistributedDataParallel, "__init__", make_ddp_init)
    patching.wrap(torch.autograd, "backward", make_backward)
    patching.wrap(torch.nn.Module, "load_state_dict", make_load)
    if not patching.ORIGINALS.get(("hooks", "forward")):
        patching.ORIGINALS[("hooks", "forward")] = True
        module_hooks.register_module_forward_pre_hook(before)
        module_hooks.register_module_forward_hook(after, always_call=True)


def _now():
    import time

    return time.time()


def _note_root(module, rec) -> None:
    from torch.nn import DataParallel

    known = ROOTS.get(id(module))
    if known is not None and known["ref"]() is module:
        return
    wrapper = next((i for i, m in MODELS.items()
                    if m["ddp"]() is not None and m["ddp"]().module is module), None)
    ddp = _ddp_index(module)
    if ddp is not None:
        kind, target = "ddp", module.module
    elif wrapper is not None:  # the wrapped module, run without its wrapper: DDP sees nothing
        kind, target, ddp = "bypass", module, wrapper
    elif isinstance(module, DataParallel):
        kind, target = "data_parallel", module
    else:
        kind, target = "plain", module
    if next(iter(target.parameters()), None) is None and next(iter(target.buffers()), None) is None:
        return  # a loss function or an activation: nothing to compare
    spot = where.line()
    index = rec.count("root")
    ROOTS[id(module)] = {"index": index, "ref": weakref.ref(module), "target": weakref.ref(target),
                         "kind": kind, "ddp": ddp}
    rec.add(records.Root(index=index, kind=kind, ddp=ddp,
                         module=type(target).__name__, **where.fields(spot)))


_GRADS = {"at": None, "names": {}}  # id(p.grad) -> name, as of the latest backward


def grad_name(tensor) -> str | None:
    """The name of the DDP-wrapped parameter whose ``.grad`` is ``tensor``, if any."""
    rec = _recorder.RECORDER
    if _GRADS["at"] != rec.backwards:
        _GRADS["at"] = rec.backwards
        _GRADS["names"] = {}
        for model in MODELS.values():
            ddp = model["ddp"]()
            if ddp is not None:
                _GRADS["names"].update({id(p.grad): n for n, p in ddp.module.named_parameters()
                                        if p.grad is not None})
    return _GRADS["names"].get(id(tensor))


def _note_unused(index: int, reach: set[int], rec) -> None:
    model = MODELS.get(index)
    ddp = model["ddp"]() if model else None
    if ddp is None:
        return
    unused = [model["names"].get(id(p), "?") for p in ddp.module.parameters()
              if p.requires_grad and id(p) not in reach]
    rec.add(records.Unused(ddp=index, names=unused))
