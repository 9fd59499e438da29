"""Optimizer steps, through torch's global hooks (``register_optimizer_step_pre_hook`` /
``_post_hook``), and a GradScaler's steps that skip ``optimizer.step()``: what happened since
the last step (micro-steps, backwards, their losses), the gradients when the last micro-step did
not synchronise them, every replica's state after the step, and the end of the run at step K on
every rank (``DoctorStop``)."""

from __future__ import annotations

import ddplab.doctor.records as records
from ddplab.doctor.ranks import patching, where
from ddplab.doctor.ranks import recorder as _recorder
from ddplab.doctor.ranks.digest import summary
from ddplab.doctor.ranks.watch.model import MODELS, ROOTS
from ddplab.doctor.settings import Settings

KEPT_MICRO = 16  # micro-steps and backwards kept per step record


def tensors_of(root: dict) -> dict:
    """name -> tensor, of what must be equal on every rank after a step: the parameters, and
    the buffers unless DDP re-broadcasts them before each forward (``broadcast_buffers``)."""
    target = root["target"]()
    if target is None:
        return {}
    found = {name: (p, "parameter") for name, p in target.named_parameters()}
    ddp = MODELS.get(root["ddp"], {}).get("ddp") if root["ddp"] is not None else None
    if ddp is None or not ddp().broadcast_buffers:
        found.update({name: (b, "buffer") for name, b in target.named_buffers()})
    return found


def grads_of(index: int) -> dict:
    model = MODELS.get(index)
    ddp = model["ddp"]() if model else None
    if ddp is None:
        return {}
    return {name: summary(p.grad) for name, p in ddp.module.named_parameters()
            if p.grad is not None}


def _parameter_names() -> dict:
    """id(parameter) -> its name in a DDP's module or a module run at top level."""
    names = {}
    for root in list(ROOTS.values()):
        target = root["target"]()
        if target is not None:
            names.update({id(p): n for n, p in target.named_parameters()})
    for model in MODELS.values():
        names.update(model["names"])
    return names


def _digest_optimizer(rec, optimizer) -> None:
    """The parameters ``optimizer`` steps, whatever module (if any) runs them: the replicas as
    the training changes them, even when the forward never goes through a DDP (``model(x)``
    beside ``ddp_model``, a path that never wraps, ``nn.DataParallel``)."""
    names = _parameter_names()
    wrapped = {id(p) for m in MODELS.values() if m["ddp"]() is not None
               for p in m["ddp"]().module.parameters()}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    tensors = {}
    for i, p in enumerate(params):
        tensors[names.get(id(p), f"param_groups[*][{i}]")] = [*summary(p), "parameter"]
    rec.add(records.Replica(root=None, tensors=tensors,
                            optimizer=getattr(optimizer, "_ddplab_doctor", None),
                            in_ddp=sum(id(p) in wrapped for p in params), params=len(params)))


def _digest_replicas(rec, optimizer) -> None:
    """Every replica's state after this step. Hashing every tensor costs about a millisecond
    per 100k parameters on a CPU, so it runs after steps 1, 2, 4, 8, ... and the last one:
    the first divergence is placed within a factor of two of its step."""
    import torch

    with torch.no_grad():
        _digest_optimizer(rec, optimizer)
        for root in list(ROOTS.values()):
            found = tensors_of(root)
            if found:
                rec.add(records.Replica(root=root["index"], tensors={
                    name: [*summary(t), what] for name, (t, what) in found.items()}))


def install() -> None:
    import torch
    from torch.optim import optimizer as optim_hooks

    settings = Settings.current()
    last = settings.steps
    stop_before = settings.role == "probe"  # the LR probe: one look

    def before(optimizer, args, kwargs, skipped=False):
        rec = _recorder.RECORDER
        if rec.draining is not None:  # a step of an epoch's one batch, training ended
            rec.micro, rec.pending = [], []
            return
        spot = where.line()
        micro, rec.micro = rec.micro, []
        backwards, rec.pending = rec.pending, []
        first = rec.steps == 0  # the first step also says the optimizer's type
        rec.add(records.Step(
            number=rec.steps + 1, **where.fields(spot),
            micro=micro[:KEPT_MICRO], micro_count=len(micro),
            backwards=backwards[:KEPT_MICRO],
            backward_count=len(backwards), optimizer=getattr(optimizer, "_ddplab_doctor", None),
            lr=[group.get("lr") for group in optimizer.param_groups],
            optimizer_type=type(optimizer).__name__ if first else None,
            grads=grads_of(micro[-1].ddp) if micro and not micro[-1].sync else None,
            skipped=skipped))
        if stop_before:
            raise _recorder.DoctorStop("probe")

    def after(optimizer, args, kwargs):
        rec = _recorder.RECORDER
        if rec.draining is not None:
            if rec.count("drained_steps") >= rec.counters.get("drained_batches", 0):
                raise _recorder.DoctorStop(f"step {rec.steps + 1}: the script trains on "
                                           "after its loaders ended")
            return  # fed by an epoch's one batch: not counted
        rec.steps += 1
        rec.counters["backwards_at_step"] = rec.backwards
        if rec.steps & (rec.steps - 1) == 0 or rec.steps >= last:  # 1, 2, 4, 8, ... and K
            _digest_replicas(rec, optimizer)
        if rec.steps >= last:
            rec.drain(f"step {last}")

    def make_optimizer_init(real):
        def __init__(self, params, defaults, *args, **kwargs):
            real(self, params, defaults, *args, **kwargs)
            rec = _recorder.RECORDER
            if "_ddplab_doctor" not in self.__dict__:
                spot = where.line()
                self.__dict__["_ddplab_doctor"] = rec.count("optimizer")
                rec.add(records.Optimizer(index=self._ddplab_doctor, type=type(self).__name__,
                                          **where.fields(spot),
                                          lr=[group.get("lr") for group in self.param_groups]))
        return __init__

    def make_scaler_step(real):
        """``GradScaler.step`` calls ``optimizer.step()`` only when the scaled gradients hold no
        inf or NaN (``torch/amp/grad_scaler.py``, ``_maybe_opt_step``); in float16 on a GPU the
        first steps often overflow. A step it skips is still a step of the loop: without it,
        the backwards of several steps would read as the micro-steps of one."""
        def step(self, optimizer, *args, **kwargs):
            rec = _recorder.RECORDER
            taken = rec.steps
            result = real(self, optimizer, *args, **kwargs)
            if rec.steps == taken and self.is_enabled():
                before(optimizer, args, kwargs, skipped=True)
                after(optimizer, args, kwargs)
            return result
        return step

    patching.wrap(torch.optim.Optimizer, "__init__", make_optimizer_init)
    patching.wrap(torch.amp.GradScaler, "step", make_scaler_step)
    if not patching.ORIGINALS.get(("hooks", "optimizer")):
        patching.ORIGINALS[("hooks", "optimizer")] = True
        optim_hooks.register_optimizer_step_pre_hook(before)
        optim_hooks.register_optimizer_step_post_hook(after)
