"""What a watcher writes on a rank and a judge reads in the doctor's process: one frozen type
per kind of record.

A watcher builds the record it saw (``RECORDER.add(records.Pass(...))``): a field it does not
know is refused there, by the type's constructor. The recorder stamps ``step`` and ``t`` and
keeps the records by kind; ``dump`` turns them into JSON for the doctor's store, and ``load``
turns them back into the same types for the judges, refusing a kind or a field it does not
know. A record that changes while the script runs (a pass over a loader, a collective whose
result comes later) is replaced by a new one (``Recorder.update``), never changed in place.

Every field is plain JSON (numbers, strings, lists, dicts), so that a record read back is
equal to the one written. ``file`` and ``line`` are always the reader's line that made the
call (``ranks/where.py``), or None where no line of the reader's is on the stack.

This module imports nothing of ddplab: rank-side code and judging both stand on it.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import ClassVar


class Word(str, enum.Enum):
    """A value that is one of a few words: equal to its word, printed and sent as JSON as it
    (Python 3.11's ``enum.StrEnum``, written out for the 3.10 that torch 2.11 still runs on)."""

    def __str__(self) -> str:
        return self.value


class Mode(Word):
    """What the script turned out to be, as rank 0's process says it (the store's ``mode``)."""

    RANKS = "ranks"  # it joins a group itself, as torchrun's ranks do: every process runs it
    SPAWN = "spawn"  # it starts its own rank processes: rank 0's process is their launcher
    NONE = "none"  # it neither joined a group nor started ranks


class DdpCall(Word):
    """A collective DDP issues itself (``Collective.by``), as the report names it."""

    SHAPE_CHECK = "DDP's check of the parameters' shapes"
    PARAMETERS = "DDP's broadcast of rank 0's parameters"
    BUFFERS = "DDP's broadcast of rank 0's buffers before a forward"
    GRADIENTS = "DDP's all-reduce of the gradients"


class Outcome(Word):
    """How the script ended in one process."""

    FINISHED = "finished"  # it ran to its end
    STOPPED = "stopped"  # the doctor stopped it (the K-th optimizer step, a third epoch)
    CRASHED = "crashed"  # an exception, or a non-zero exit status


@dataclasses.dataclass(frozen=True, kw_only=True)
class Record:
    """Stamped by the recorder: ``step`` is the number of optimizer steps this process had
    taken when it saw the call, ``t`` the order of everything this process saw (0, 1, ...).
    ``PARTS`` names the fields that hold a list of smaller frozen records, and their type."""

    KIND: ClassVar[str] = ""
    PARTS: ClassVar[dict] = {}
    step: int = 0
    t: int = 0


# -- the process group (ranks/watch/group.py)

@dataclasses.dataclass(frozen=True)
class GroupInit(Record):
    """``init_process_group``: the backend the script asked for, the one that runs here (NCCL
    without CUDA becomes gloo), the one torch reports, and the group's size."""

    KIND: ClassVar[str] = "group_init"
    requested: str | None
    used: str | None
    backend: str
    file: str | None
    line: int | None
    world_size: int


@dataclasses.dataclass(frozen=True)
class GroupDestroy(Record):
    """``destroy_process_group`` of the default group (deferred to the process's end)."""

    KIND: ClassVar[str] = "group_destroy"
    file: str | None
    line: int | None


@dataclasses.dataclass(frozen=True)
class DuplicateRank(Record):
    """A process claimed a rank another process of the same group had claimed already: the
    rank, the group's size, this process's id and the reader's line that passed it."""

    KIND: ClassVar[str] = "duplicate_rank"
    rank: int
    world_size: int
    pid: int
    file: str | None
    line: int | None


@dataclasses.dataclass(frozen=True)
class WorldSizeRead(Record):
    """The first time the reader's code read the world size (``how``: the call), before its
    first optimizer step."""

    KIND: ClassVar[str] = "world_size_read"
    how: str
    file: str | None
    line: int | None


# -- collectives (ranks/watch/collectives.py)

@dataclasses.dataclass(frozen=True)
class Collective(Record):
    """One collective the script called (or DDP did: ``by``): its op, the script's sequence
    number in the group (None for point-to-point and for DDP's own), the group (``"world"``
    or its ranks, ``"0,1"``), the backend asked for and whether NCCL's rules hold (CPU
    tensors fail), the tensors' devices, the first tensor's dtype and size and (up to 8
    numbers) its values before and after, the reduce op, the evaluation samples this rank drew
    since its previous reduction, and the DDP parameter whose gradient it is (``grad_of``)."""

    KIND: ClassVar[str] = "collective"
    op: str
    seq: int | None
    group: str
    file: str | None
    line: int | None
    devices: list
    nccl: bool
    requested: str | None
    reduce: str | None
    dtype: str | None
    numel: int | None
    before: list | None
    eval_samples: int
    p2p: bool
    after: list | None = None
    by: str | None = None  # a DdpCall, when DDP issued it (ranks/watch/ddp_collectives.py)
    grad_of: str | None = None  # the DDP parameter whose .grad is the first tensor


# -- mixed precision and clipping (ranks/watch/amp.py)

@dataclasses.dataclass(frozen=True)
class Clip(Record):
    """A gradient clip (``how``: which function), whether an enabled GradScaler's scale was
    still on the gradients (and that scale), the norm it returned and the limit it got."""

    KIND: ClassVar[str] = "clip"
    how: str
    file: str | None
    line: int | None
    scaled: bool
    scale: float | None
    norm: float | None
    limit: float | None


# -- files (ranks/watch/files.py)

@dataclasses.dataclass(frozen=True)
class Write(Record):
    """A file the reader's code opened for writing (``how``: ``open`` or ``torch.save``), with
    ``open``'s mode (``"w"``, ``"a"``, ...; None for torch.save and a flags-only open)."""

    KIND: ClassVar[str] = "write"
    path: str
    how: str
    file: str | None
    line: int | None
    mode: str | None = None


# -- data (ranks/watch/data.py)

@dataclasses.dataclass(frozen=True)
class Loader(Record):
    """A DataLoader made: its dataset (type, length, a fingerprint equal on two ranks for the
    same data), its sampler (type, length, whether it is a DistributedSampler), batch size."""

    KIND: ClassVar[str] = "loader"
    index: int
    file: str | None
    line: int | None
    dataset: str
    dataset_len: int | None
    fingerprint: str
    iterable: bool
    sampler: str | None
    distributed: bool
    sampler_len: int | None
    batch_size: int | None
    drop_last: bool


@dataclasses.dataclass(frozen=True)
class Pass(Record):
    """One ``iter(loader)`` (``number``: the loader's 0th, 1st, ... pass), as far as it went:
    batches and samples drawn, whether a backward ran during it (``training``), whether the
    doctor cut it (``capped``) or it ran out (``exhausted``), and the first batch's digest.
    ``backwards_seen`` and ``steps_at_start`` are the counts the cut is decided by."""

    KIND: ClassVar[str] = "pass"
    loader: int
    number: int
    len: int | None
    file: str | None
    line: int | None
    batches: int = 0
    samples: int = 0
    training: bool = False
    capped: bool = False
    exhausted: bool = False
    backwards_seen: int = 0
    steps_at_start: int = 0
    first: str | None = None


@dataclasses.dataclass(frozen=True)
class SamplerOrder(Record):
    """The indices a DistributedSampler gave this rank for one pass: its settings, the first 8
    indices, their count and a digest of all of them, and the loader pass it served."""

    KIND: ClassVar[str] = "sampler_order"
    sampler: int
    epoch: int
    shuffle: bool
    seed: int
    drop_last: bool
    num_replicas: int
    sampler_rank: int
    dataset_len: int | None
    total_size: int
    first: list
    count: int
    digest: str
    loader: int | None
    pass_number: int | None
    indices: list | None = None  # all of them, up to 65,536: shards compared across ranks


@dataclasses.dataclass(frozen=True)
class SetEpoch(Record):
    """``sampler.set_epoch(epoch)``."""

    KIND: ClassVar[str] = "set_epoch"
    sampler: int
    epoch: int
    file: str | None
    line: int | None


# -- the model (ranks/watch/model.py)

@dataclasses.dataclass(frozen=True)
class Ddp(Record):
    """A DistributedDataParallel made: its options, its parameters' devices, the backend its
    group asked for (and whether NCCL's rules hold), what it all-reduces (trainable
    parameters, numbers, bytes), its buffers and the wrapped module's type."""

    KIND: ClassVar[str] = "ddp"
    index: int
    file: str | None
    line: int | None
    find_unused: bool
    broadcast_buffers: bool
    static_graph: bool
    devices: list
    nccl: bool
    requested: str | None
    params: int
    numel: int
    bytes: int
    buffers: int
    module: str


@dataclasses.dataclass(frozen=True)
class Root(Record):
    """A module run at top level with parameters or buffers: a DDP (``kind`` ``"ddp"``, with
    its index), the module inside a DDP run without it (``"bypass"``, with the DDP's index), a
    ``nn.DataParallel`` (``"data_parallel"``) or another module (``"plain"``), whose state is
    compared across ranks."""

    KIND: ClassVar[str] = "root"
    index: int
    kind: str
    ddp: int | None
    module: str
    file: str | None
    line: int | None


@dataclasses.dataclass(frozen=True)
class Unused(Record):
    """The trainable parameters of DDP ``ddp`` that one backward did not reach."""

    KIND: ClassVar[str] = "unused"
    ddp: int
    names: list


@dataclasses.dataclass(frozen=True)
class LoadStateDict(Record):
    """``Module.load_state_dict``: on which module, whether any DDP existed by then, and
    whether the module is a DDP or the module inside one."""

    KIND: ClassVar[str] = "load_state_dict"
    file: str | None
    line: int | None
    module: str
    after_wrap: bool
    wrapped: bool


# -- optimizer steps (ranks/watch/steps.py)

@dataclasses.dataclass(frozen=True)
class Optimizer(Record):
    """An optimizer made: its type and its groups' learning rates."""

    KIND: ClassVar[str] = "optimizer"
    index: int
    type: str
    file: str | None
    line: int | None
    lr: list


@dataclasses.dataclass(frozen=True)
class MicroStep:
    """A DDP forward with gradients enabled (part of a ``Step``): which DDP, whether it
    synchronises (``require_backward_grad_sync``), its batch size (None if unknown) and the
    digest of its first input."""

    ddp: int
    sync: bool
    batch: int | None
    digest: str | None = None  # of the forward's first input tensor: compared across ranks


@dataclasses.dataclass(frozen=True)
class Backward:
    """A backward (part of a ``Step``): the reader's line, and the constant factor between the
    loss given to it and the computation under it (``loss / 4``: 0.25, ``ops`` ``["/ 4"]``,
    ``under`` the autograd node below them); ``factor`` None where the loss was not one
    tensor."""

    file: str | None
    line: int | None
    factor: float | None
    ops: list
    under: str | None


@dataclasses.dataclass(frozen=True)
class Step(Record):
    """An optimizer step (``number``: 1, 2, ...) and what led to it: the DDP micro-steps (the
    first 16) and the backwards (the first 16) since the step before, with their
    counts. The first step also has the learning rates and the optimizer's type; a step after
    a micro-step that did not synchronise has each gradient's summary (``grads``)."""

    KIND: ClassVar[str] = "step"
    PARTS: ClassVar[dict] = {"micro": MicroStep, "backwards": Backward}
    number: int
    file: str | None
    line: int | None
    micro: list[MicroStep]
    micro_count: int
    backwards: list[Backward]
    backward_count: int
    optimizer: int | None
    lr: list | None = None
    optimizer_type: str | None = None
    grads: dict | None = None


@dataclasses.dataclass(frozen=True)
class Replica(Record):
    """State after a step, name -> [digest, sum, norm, "parameter" or "buffer"]: of a module
    run at top level (``root``), or of the parameters an optimizer steps (``optimizer``, with
    how many of them a DDP wraps: ``in_ddp`` of ``params``)."""

    KIND: ClassVar[str] = "replica"
    root: int | None
    tensors: dict
    optimizer: int | None = None
    in_ddp: int = 0
    params: int = 0


# -- gathered evaluation results (ranks/watch/gathered.py)

@dataclasses.dataclass(frozen=True)
class GatheredUse(Record):
    """The first use (``how``: the operation) of rows an ``all_gather`` at ``gather_file``:
    ``gather_line`` brought from an evaluation DistributedSampler's pass: how many samples it
    holds, how many distinct, which ones it holds more than once (``repeats``: index -> times)
    and which of the dataset's samples it misses (the first 8 of each)."""

    KIND: ClassVar[str] = "gathered_use"
    how: str
    file: str | None
    line: int | None
    gather_file: str | None
    gather_line: int | None
    loader: int | None
    pass_number: int | None
    dataset_len: int | None
    samples: int
    distinct: int
    repeated: list
    repeats: dict
    missing: list


# -- seeds (ranks/watch/seeds.py)

@dataclasses.dataclass(frozen=True)
class Seed(Record):
    """``torch.manual_seed(seed)`` called by the reader's code."""

    KIND: ClassVar[str] = "seed"
    seed: int
    file: str | None
    line: int | None


# -- printed lines (ranks/watch/prints.py)

@dataclasses.dataclass(frozen=True)
class Printed(Record):
    """A line the reader's code printed (to stdout) with a number in it, cut at 200
    characters."""

    KIND: ClassVar[str] = "printed"
    text: str
    file: str | None
    line: int | None


# -- the script's CUDA on CPU ranks (ranks/cuda_on_cpu/), its trackers (ranks/scratch.py)

@dataclasses.dataclass(frozen=True)
class CudaOnCpu(Record):
    """This machine has fewer GPUs than ranks: the script's CUDA is mapped onto the CPU."""

    KIND: ClassVar[str] = "cuda_on_cpu"
    gpus: int
    ranks: int


@dataclasses.dataclass(frozen=True)
class Mapped(Record):
    """One kind of CUDA call mapped onto the CPU (``what``: ``.cuda()``, ``autocast('cuda')
    -> autocast('cpu', bfloat16)``, ...), at the first line that made it."""

    KIND: ClassVar[str] = "mapped"
    what: str
    file: str | None
    line: int | None


@dataclasses.dataclass(frozen=True)
class Trackers(Record):
    """The experiment trackers the script imported, and the settings (variable -> value) that
    kept them from recording a run."""

    KIND: ClassVar[str] = "trackers"
    modules: list
    settings: dict


@dataclasses.dataclass(frozen=True)
class LocalRankOption(Record):
    """An argparse option named ``--local_rank`` / ``--local-rank`` that the script defines
    (torch.distributed.launch passed it; torchrun does not)."""

    KIND: ClassVar[str] = "local_rank_option"
    name: str
    default: object
    file: str | None
    line: int | None


KINDS: dict[str, type[Record]] = {kind.KIND: kind for kind in (
    GroupInit, GroupDestroy, DuplicateRank, WorldSizeRead, Collective, Clip, Write, Loader,
    Pass, SamplerOrder, SetEpoch, Ddp, Root, Unused, LoadStateDict, Optimizer, Step, Replica,
    CudaOnCpu, Mapped, Trackers, LocalRankOption, GatheredUse, Seed, Printed)}


def to_json(record: Record) -> dict:
    """The record's fields (and its parts' fields) as a dict of plain JSON values."""
    return dataclasses.asdict(record)


def from_json(kind: str, fields: dict) -> Record:
    """The record of ``kind`` with ``fields``; a kind or a field the doctor does not know is
    an error that names the ones it knows."""
    if kind not in KINDS:
        raise ValueError(f"no record kind {kind!r}; the kinds are {', '.join(sorted(KINDS))}")
    cls = KINDS[kind]
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"a {kind!r} record has no field {', '.join(unknown)}; its fields are "
                         f"{', '.join(sorted(known))}")
    parts = {name: [_part(kind, part, item) for item in fields[name]]
             for name, part in cls.PARTS.items() if fields.get(name) is not None}
    return cls(**dict(fields, **parts))


def _part(kind: str, part: type, fields: dict):
    known = {field.name for field in dataclasses.fields(part)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"a {kind!r} record's {part.__name__} has no field "
                         f"{', '.join(unknown)}; its fields are {', '.join(sorted(known))}")
    return part(**fields)


def dump(by_kind: dict[str, list]) -> dict[str, list]:
    """kind -> records, as JSON."""
    return {kind: [to_json(r) for r in found] for kind, found in by_kind.items()}


def load(by_kind: dict[str, list]) -> dict[str, list]:
    """kind -> records, from JSON (``dump``'s inverse)."""
    return {kind: [from_json(kind, fields) for fields in found]
            for kind, found in by_kind.items()}
