"""What the reference run needs of the N-rank run, and what it changes in both: the training
batches of each optimizer step, the model's state as DDP wraps it, the
parameters and learning rates after each step (``doctor/reference/layout.py`` says where).

Only the doctor's steps are kept (``Settings.steps``, 8 by default), and no more than
``BATCH_BYTES`` of batches per step per rank: a run whose batches are larger has no reference
run, and says so. Parameters are kept after every step up to ``STATE_BYTES`` of them, and after
steps 1, 2, 4, 8, ... beyond.

In both runs, every dropout layer of a DDP-wrapped model is switched off (``p = 0``, and
``MultiheadAttention``'s ``dropout``) as DDP wraps it: a mask drawn in a rank
cannot be drawn again in one process, so the two runs compare without it. A functional
``F.dropout`` with its own ``p`` in the model's code is not reached and shows as a difference.

In the reference run (``Settings.role == "reference"``) the replayed passes yield the N ranks'
samples (``ranks/replay.py``), the model starts from the N-rank run's state as DDP wraps it,
each forward of a replayed batch runs in the ranks' chunks (``ranks/chunked.py``), a replayed
loader's ``len()`` is the number of batches an epoch of the replay has, and each
optimizer step runs at rank 0's learning rates of that step: a learning rate the script scales
with the world size is a choice the doctor names (its factor, from the LR the one process set
itself), not a difference that hides every other one.
"""

from __future__ import annotations

import os

from ddplab.doctor.ranks import chunked, patching, replay
from ddplab.doctor.ranks import recorder as _recorder
from ddplab.doctor.ranks.digest import first_tensor
from ddplab.doctor.ranks.watch.data import PassIterator, Wrapped
from ddplab.doctor.reference import collate, layout
from ddplab.doctor.settings import Settings

BATCH_BYTES = 64 << 20  # of one step's batches on one rank
STATE_BYTES = 256 << 20  # of parameters, kept after every step up to this size
_STATE = {"pending": [], "notes": {}, "started": False, "replay": None, "folder": None,
          "side": layout.RUN}


def _rank() -> int:
    rec = _recorder.RECORDER
    return rec.rank if rec.rank is not None else int(os.environ.get("RANK", "0"))


def _note(key: str, value) -> None:
    _STATE["notes"][key] = value
    layout.write_json(_STATE["notes"], layout.path(_STATE["folder"], _STATE["side"], "notes",
                                                   None, _rank()))


class Tap(Wrapped):
    """A training loader's pass (``watch.data.PassIterator``), its batches kept (the N-rank
    run) or replaced by the N ranks' (the reference run)."""

    def __next__(self):
        batch = next(self._inner)
        record, rec = self._inner.record, _recorder.RECORDER
        plays = _STATE["replay"]
        if plays is not None:
            if not plays.replays(record.loader, record.number):
                return batch
            replayed = plays.next_for(record.loader, record.number)
            if replayed is None:
                raise StopIteration
            return replayed
        if rec.steps < Settings.current().steps and "unrecorded" not in _STATE["notes"]:
            _STATE["pending"].append({"loader": record.loader, "pass": record.number,
                                      "backwards": rec.backwards, "tap": self,
                                      "batch": collate.detached(batch)})
        return batch


def _trained(entry: dict, latest: bool, rec) -> bool:
    """Whether a batch yielded since the last step was trained on: its pass is a training
    pass by now (``watch.data`` says so at the pass's next batch after a backward), or it is
    the batch yielded last and a backward ran after it. An evaluation pass between two steps
    is neither."""
    return entry["tap"]._inner.record.training or (latest and entry["backwards"] < rec.backwards)


def _after_step(optimizer, args, kwargs) -> None:
    from ddplab.doctor.ranks.watch.steps import _parameter_names

    rec, folder = _recorder.RECORDER, _STATE["folder"]
    step = rec.steps
    if step > Settings.current().steps or step == 0 or step == _STATE.get("last_step"):
        return  # a step the doctor does not count (an epoch's one batch, training ended)
    _STATE["last_step"] = step
    rank, side = _rank(), _STATE["side"]
    if side == layout.RUN:
        pending = _STATE["pending"]
        trained = [{k: e[k] for k in ("loader", "pass", "batch")} for e in pending
                   if _trained(e, e is pending[-1], rec)]
        _STATE["pending"] = []
        if "unrecorded" not in _STATE["notes"]:
            size = layout.save(trained, layout.path(folder, side, "batches", step, rank))
            if size > BATCH_BYTES:
                _note("unrecorded", f"step {step}'s batches are {size >> 20} MiB on rank "
                                    f"{rank}, more than the {BATCH_BYTES >> 20} MiB kept")
    layout.write_json([g.get("lr") for g in optimizer.param_groups],
                      layout.path(folder, side, "lr", step, rank))
    names = _parameter_names()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    kept = sum(p.numel() * p.element_size() for p in params) <= STATE_BYTES
    if kept or step & (step - 1) == 0 or step == Settings.current().steps:
        state = {names.get(id(p), f"param_groups[*][{i}]"): p.detach().to("cpu", copy=True)
                 for i, p in enumerate(params)}
        extra = {"samples": _STATE["replay"].served.get(step, 0),
                 "planned": _STATE["replay"].planned.get(step, 0)} if _STATE["replay"] else {}
        layout.save({"params": state, "optimizer": getattr(optimizer, "_ddplab_doctor", None),
                     **extra},
                    layout.path(folder, side, "state", step, rank))


def _before_step(optimizer, args, kwargs) -> None:
    """The reference's step at rank 0's learning rates (its own are kept beside them)."""
    step = _recorder.RECORDER.steps + 1
    if step > Settings.current().steps:
        return
    folder = _STATE["folder"]
    own = [g.get("lr") for g in optimizer.param_groups]
    layout.write_json(own, layout.path(folder, layout.REFERENCE, "own_lr", step, 0))
    ranks = layout.read_json(layout.path(folder, layout.RUN, "lr", step, 0))
    if ranks is not None and len(ranks) == len(optimizer.param_groups):
        for group, lr in zip(optimizer.param_groups, ranks):
            if lr is not None and isinstance(group.get("lr"), float):
                group["lr"] = lr


def _note_autocast() -> None:
    """The dtype the forwards compute in, where autocast is on (the comparison's allowance
    follows it)."""
    import torch

    for device in ("cuda", "cpu"):
        if torch.is_autocast_enabled(device):
            _note("autocast", str(torch.get_autocast_dtype(device)).removeprefix("torch."))
            return
    _note("autocast", None)


def _switch_off_dropout(module) -> int:
    import torch.nn as nn

    count = 0
    for m in module.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0:
            m.p, count = 0.0, count + 1
        elif isinstance(m, nn.MultiheadAttention) and m.dropout > 0:
            m.dropout, count = 0.0, count + 1
    return count


def _wrapped(ddp) -> None:
    """At a DDP's construction (its module now holds rank 0's parameters, broadcast): dropout
    off; the state saved (rank 0 of the N-rank run) or loaded (the reference)."""
    import torch

    if _STATE["started"]:  # the first DDP is the model trained
        return
    _STATE["started"] = True
    _note("dropout_off", _switch_off_dropout(ddp.module))
    state = ddp.module.state_dict(keep_vars=True)
    if _STATE["replay"] is None:
        if _rank() == 0:
            layout.save({k: v.detach().to("cpu", copy=True) for k, v in state.items()},
                        layout.init_path(_STATE["folder"]))
        return
    start = layout.load(layout.init_path(_STATE["folder"]))
    with torch.no_grad():
        for name, value in state.items():
            if name in start and start[name].shape == value.shape:
                value.copy_(start[name])
    _note("started_from", "the N-rank run's rank 0 state as DDP wrapped it")


def install() -> None:
    import torch
    import torch.utils.data as data
    from torch.nn.parallel import DistributedDataParallel
    from torch.optim import optimizer as optim_hooks

    from ddplab.doctor.ranks.watch.files import unwatched

    layout.quiet = unwatched  # the doctor's own files are not the reader's writes

    settings = Settings.current()
    if settings.record is None or settings.role == "probe":
        return
    _STATE["folder"] = settings.record
    if settings.role == "reference":
        _STATE["side"] = layout.REFERENCE
        _STATE["replay"] = replay.Replay(settings.record)
        if _STATE["replay"].notes:
            _note("replay", _STATE["replay"].notes)

    def make_iter(real):
        def __iter__(self):
            found = real(self)
            return Tap(found) if isinstance(found, PassIterator) else found
        return __iter__

    def make_forward(real):
        def forward(self, *args, **kwargs):
            if not (torch.is_grad_enabled() and self.training):
                return real(self, *args, **kwargs)
            if "autocast" not in _STATE["notes"]:
                _note_autocast()
            plays = _STATE["replay"]
            chunks = plays.chunks if plays is not None else None
            first = first_tensor([list(args), kwargs])
            if (chunks and len(chunks) > 1 and first is not None and first.dim()
                    and first.shape[0] == sum(chunks)
                    and not chunked.has_sync_batchnorm(self.module)):
                if "chunked" not in _STATE["notes"]:
                    _note("chunked", True)
                return chunked.forward_in_chunks(self.module, chunks, args, kwargs)
            return real(self, *args, **kwargs)
        return forward

    def make_init(real):
        def __init__(self, module, *args, **kwargs):
            real(self, module, *args, **kwargs)
            _wrapped(self)
        return __init__

    def make_len(real):
        def __len__(self):
            index = getattr(self, "_ddplab_doctor", None)
            plays = _STATE["replay"]
            if plays is not None and index in plays.lens:
                return plays.lens[index]
            return real(self)
        return __len__

    patching.wrap(DistributedDataParallel, "__init__", make_init, "batches")
    patching.wrap(data.DataLoader, "__len__", make_len, "batches")
    patching.wrap(data.DataLoader, "__iter__", make_iter, "batches")
    patching.wrap(DistributedDataParallel, "forward", make_forward, "batches")
    if not patching.ORIGINALS.get(("hooks", "batches")):
        patching.ORIGINALS[("hooks", "batches")] = True
        optim_hooks.register_optimizer_step_post_hook(_after_step)
        if _STATE["replay"] is not None:
            optim_hooks.register_optimizer_step_pre_hook(_before_step)
