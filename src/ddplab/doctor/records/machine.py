"""Records of the machine the script meets: its CUDA on CPU ranks (ranks/cuda_on_cpu/), its
trackers (ranks/scratch.py), its ``--local_rank`` option."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ddplab.doctor.records.base import Located, Record


@dataclasses.dataclass(frozen=True)
class CudaOnCpu(Record):
    """This machine has fewer GPUs than ranks: the script's CUDA is mapped onto the CPU."""

    KIND: ClassVar[str] = "cuda_on_cpu"
    gpus: int
    ranks: int


@dataclasses.dataclass(frozen=True)
class Mapped(Located):
    """One kind of CUDA call mapped onto the CPU (``what``: ``.cuda()``, ``autocast('cuda')
    -> autocast('cpu', bfloat16)``, ...), at the first line that made it."""

    KIND: ClassVar[str] = "mapped"
    what: str


@dataclasses.dataclass(frozen=True)
class CudaIndex(Located):
    """A GPU the script put a tensor or a module on (mapped onto the CPU), at the first line
    that used it in this process: ``index`` is the one named (``"cuda:1"``, ``.cuda(1)``) or,
    for ``"cuda"`` alone, the current device (``torch.cuda.set_device``'s, 0 where it was
    never called: ``set_device``)."""

    KIND: ClassVar[str] = "cuda_index"
    index: int
    set_device: bool


@dataclasses.dataclass(frozen=True)
class Trackers(Record):
    """The experiment trackers the script imported, and the settings (variable -> value) that
    kept them from recording a run."""

    KIND: ClassVar[str] = "trackers"
    modules: list
    settings: dict


@dataclasses.dataclass(frozen=True)
class LocalRankOption(Located):
    """An argparse option named ``--local_rank`` / ``--local-rank`` that the script defines
    (torch.distributed.launch passed it; torchrun does not)."""

    KIND: ClassVar[str] = "local_rank_option"
    name: str
    default: object
