"""The mark: which tensors the script put on ``cuda`` (a tensor mapped to the CPU, and every
tensor computed from one), what was mapped, and whether mapping is on in this process."""

from __future__ import annotations

import sys
import weakref

import ddplab.doctor.records as records
from ddplab.doctor.ranks import recorder as _recorder
from ddplab.doctor.ranks import where

STATE = {"on": False, "gpus": 0, "ranks": 0, "device": 0}
_MARKED: dict[int, weakref.ref] = {}  # id(tensor) -> the tensor, for tensors put on "cuda"
NOTED: set[str] = set()


def active() -> bool:
    return STATE["on"]


def marked(tensor) -> bool:
    ref = _MARKED.get(id(tensor))
    return ref is not None and ref() is tensor


def mark(value):
    import torch

    if isinstance(value, torch.Tensor):
        key = id(value)
        if key not in _MARKED or _MARKED[key]() is not value:
            _MARKED[key] = weakref.ref(value, lambda ref, key=key: _forget(key, ref))
    elif isinstance(value, (list, tuple)):
        for item in value:
            mark(item)
    return value


def _forget(key: int, ref) -> None:
    if _MARKED.get(key) is ref:
        del _MARKED[key]


def unmark(tensor) -> None:
    if marked(tensor):
        del _MARKED[id(tensor)]


def device_type(tensor) -> str:
    """Where the script put ``tensor``: ``cuda`` for a mapped one, else its device."""
    return "cuda" if marked(tensor) else tensor.device.type


def any_marked(values) -> bool:
    if not _MARKED:
        return False
    for value in values:
        if type(value) in (list, tuple):
            if any_marked(value):
                return True
        elif id(value) in _MARKED and marked(value):
            return True
    return False


def is_cuda(device) -> bool:
    """A device argument that names a GPU: ``"cuda"``, ``"cuda:1"``, ``torch.device("cuda")``,
    or an index (``.to(0)`` is ``cuda:0``)."""
    import torch

    if isinstance(device, str):
        return device.startswith("cuda")
    if isinstance(device, torch.device):
        return device.type == "cuda"
    return isinstance(device, int) and not isinstance(device, bool)


def note(what: str) -> None:
    """Record, once per process, that ``what`` was mapped, at the script's line."""
    if what in NOTED:
        return
    NOTED.add(what)
    spot = where.line()
    _recorder.RECORDER.add(records.Mapped(what=what, **where.fields(spot)))


SET_DEVICE = "torch.cuda.set_device"  # noted by host_cuda's set_device


def placed(device) -> None:
    """Record, once per index in this process, the GPU a tensor or module was put on:
    ``device`` as the script named it (``"cuda"``, ``"cuda:1"``, a ``torch.device``, an index,
    or None for ``.cuda()``), ``"cuda"`` alone being the current device."""
    import torch

    index = device if isinstance(device, int) else None
    if isinstance(device, (str, torch.device)):
        index = torch.device(device).index
    index = STATE["device"] if index is None else index
    key = f"cuda index {index}"
    if key in NOTED:
        return
    NOTED.add(key)
    spot = where.line()
    _recorder.RECORDER.add(records.CudaIndex(index=index, set_device=SET_DEVICE in NOTED,
                                             **where.fields(spot)))


def from_reader(depth: int = 2) -> bool:
    return where.is_reader_file(sys._getframe(depth).f_code.co_filename)
