"""Devices, through torch's own override point: a ``TorchFunctionMode`` sees every torch
function, method and tensor property. ``device="cuda"`` (a string, a ``torch.device`` or an
index) becomes the CPU, ``.cuda()`` and ``.to("cuda")`` / ``.to(0)`` a copy on the CPU,
``pin_memory`` nothing; their results are marked, and so is every result computed from a
marked tensor. The script's own code reads a marked tensor's ``.device`` as ``cuda`` (so that
``torch.zeros(2, device=x.device)`` is on "cuda" too); torch's code reads the truth.
``Module.to`` / ``.cuda()`` / ``.cpu()`` are wrapped (their device parsing refuses an index on
a CPU build) and mark the parameters and buffers; ``torch.device(index)`` is ``cuda:<index>``."""

from __future__ import annotations

from ddplab.doctor.ranks import patching
from ddplab.doctor.ranks.cuda_on_cpu.marks import (
    STATE,
    any_marked,
    from_reader,
    is_cuda,
    mark,
    marked,
    note,
    placed,
    unmark,
)


def mode_class():
    import torch
    from torch.overrides import TorchFunctionMode

    to, cuda, cpu = torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu
    device_get, is_cuda_get = torch.Tensor.device.__get__, torch.Tensor.is_cuda.__get__
    get_device = torch.Tensor.get_device

    def where_is(func, args, kwargs):
        result = func(*args, **kwargs)
        if marked(args[0]) and from_reader(3):
            return {device_get: torch.device("cuda", STATE["device"]),
                    is_cuda_get: True}.get(func, STATE["device"])
        return result

    def pin_memory(func, args, kwargs):
        note("pin_memory")
        return args[0]

    def move(func, args, kwargs):
        if func is to:
            target, kwargs = _to_target(args, kwargs)
        else:
            target = "cuda" if func is cuda else "cpu"
            kwargs = {k: v for k, v in kwargs.items() if k != "device"}
        source = args[0]
        if target == "cuda":
            if marked(source) and "dtype" not in kwargs:
                return source  # already "on the GPU": torch returns the tensor itself
            note(".cuda()" if func is cuda else ".to('cuda')")
            placed(_named(args, kwargs))
            return mark(source.to(copy=True, **kwargs))
        if target == "cpu" and marked(source):
            return source.to(copy=True, **kwargs)  # a copy off the GPU, not marked
        result = to(source, **kwargs) if func is to else func(source, **kwargs)
        return mark(result) if marked(source) else result

    special = {device_get: where_is, is_cuda_get: where_is, get_device: where_is,
               torch.Tensor.pin_memory: pin_memory, to: move, cuda: move, cpu: move}

    class CudaOnCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            handler = special.get(func)
            if handler is not None:
                return handler(func, args, kwargs or {})
            if kwargs:
                if "device" in kwargs and is_cuda(kwargs["device"]):
                    note("device='cuda'")
                    placed(kwargs["device"])
                    return mark(func(*args, **dict(kwargs, device="cpu",
                                                   **({"pin_memory": False}
                                                      if "pin_memory" in kwargs else {}))))
                if kwargs.get("pin_memory"):
                    kwargs = dict(kwargs, pin_memory=False)
                result = func(*args, **kwargs)
                if any_marked(args) or any_marked(kwargs.values()):
                    mark(result)
                return result
            result = func(*args)
            if any_marked(args):
                mark(result)
            return result

    return CudaOnCpu


def _named(args, kwargs):
    """The device ``.to(...)`` or ``.cuda(...)`` was given (None: ``.cuda()``, or another
    tensor's device)."""
    import torch

    for value in args[1:]:
        if isinstance(value, (str, torch.device, int)) and not isinstance(value, bool):
            return value
    return kwargs.get("device")


def _to_target(args, kwargs):
    """``Tensor.to``'s arguments as keywords, and whether they move to ``cuda`` or ``cpu``
    (None: a dtype only, or another tensor's device, which the mark follows)."""
    import torch

    kwargs = dict(kwargs)
    target = None
    for value in args[1:]:
        if isinstance(value, torch.dtype):
            kwargs["dtype"] = value
        elif isinstance(value, bool):
            kwargs["non_blocking"] = value
        elif isinstance(value, torch.Tensor):
            kwargs["dtype"] = value.dtype
            target = "cuda" if marked(value) else value.device.type
        elif value is not None:
            kwargs["device"] = value
    kwargs.pop("copy", None)
    device = kwargs.pop("device", None)
    if device is not None:
        target = "cuda" if is_cuda(device) else torch.device(device).type
    if target not in (None, "cuda"):
        kwargs["device"] = "cpu"
    return target, kwargs


def install_module_devices() -> None:
    import torch

    def tensors(module):
        yield from module.parameters()
        yield from module.buffers()

    def make_to(real):
        def to(self, *args, **kwargs):
            device = kwargs.get("device", args[0] if args and not isinstance(
                args[0], (torch.dtype, torch.Tensor)) else None)
            if isinstance(device, (str, torch.device, int)) and not isinstance(device, bool):
                if is_cuda(device):
                    note("model.to('cuda')")
                    placed(device)
                    rest = [a for a in args if a is not device]
                    kwargs = {k: v for k, v in kwargs.items() if k != "device"}
                    result = real(self, *rest, **kwargs)
                    for t in tensors(self):
                        mark(t)
                    return result
                for t in tensors(self):
                    unmark(t)
            return real(self, *args, **kwargs)
        return to

    def make_cuda(real):
        def cuda(self, device=None):
            note("model.cuda()")
            placed(device)
            for t in tensors(self):
                mark(t)
            return self
        return cuda

    def make_cpu(real):
        def cpu(self):
            for t in tensors(self):
                unmark(t)
            return self
        return cpu

    patching.wrap(torch.nn.Module, "to", make_to, "cuda")
    patching.wrap(torch.nn.Module, "cuda", make_cuda, "cuda")
    patching.wrap(torch.nn.Module, "cpu", make_cpu, "cuda")


def install_generator() -> None:
    """``torch.Generator(device="cuda")``: a class of C, which the override point does not see;
    a subclass that makes a CPU generator (an instance of torch's class, as torch checks)."""
    import torch

    def make(real):
        class Generator(real):
            def __new__(cls, device="cpu"):
                if is_cuda(device):
                    note("torch.Generator(device='cuda')")
                    device = "cpu"
                return real.__new__(cls, device)

            def __init__(self, device="cpu"):
                pass  # made in __new__

        Generator.__qualname__ = Generator.__name__ = "Generator"
        return Generator

    patching.replace(torch, "Generator", make, "cuda")


def install_device_index() -> None:
    """``torch.device(0)``, ``torch.device(torch.cuda.current_device())``: an index alone names
    the current accelerator, which a CPU build has none of ("Cannot access accelerator device
    when none is available"). ``torch.device`` is a class of C that cannot be subclassed, so
    its stand-in makes torch's own devices (``isinstance`` answers for them as for torch's
    class), an index alone ``cuda:<index>``, as on a machine with GPUs."""
    import torch

    def make(real):
        class Kind(type):
            def __instancecheck__(cls, value):
                return isinstance(value, real)

            def __subclasscheck__(cls, other):
                return issubclass(other, real)

        class device(metaclass=Kind):
            def __new__(cls, *args, **kwargs):
                if (len(args) == 1 and not kwargs and isinstance(args[0], int)
                        and not isinstance(args[0], bool)):
                    note("torch.device(index) -> torch.device('cuda', index)")
                    return real("cuda", args[0])
                return real(*args, **kwargs)

        device.__qualname__ = device.__name__ = "device"
        device.__module__, device.__doc__ = real.__module__, real.__doc__
        return device

    patching.replace(torch, "device", make, "cuda")
