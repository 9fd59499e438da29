"""The script's process groups: the backend it asked for, the one it gets, where it joins.

``init_process_group`` is wrapped (no hook exists for it):

* the backend asked for is recorded; NCCL on a machine without CUDA becomes gloo, and the
  collectives are still judged by NCCL's rules (``cpu-tensor-nccl``);
* locally, the rendezvous goes through the doctor's store on loopback, whatever address and
  port the script names (the PyTorch tutorial's ``MASTER_PORT=12355`` would clash between two
  doctors, and its rank 0 would listen on every interface);
* the group's timeout is the doctor's plus 30 s, so that the doctor names a hang before gloo
  gives up on it;
* each process claims its rank in the doctor's store first: a second claim of the same rank (a
  rank written into the script, the same in every process) fails at once, where the group
  would wait for the missing rank: on gloo until its store's timeout, on NCCL in the first
  collective, with no timeout (no barrier after init unless ``TORCH_DIST_INIT_BARRIER=1``,
  ``_is_barrier_after_init`` in torch/distributed/distributed_c10d.py) (``duplicate-rank``);
* this process learns its rank, and its watchdog starts.

``destroy_process_group`` is deferred to the process's end: a rank that tears its group down
while another still waits in a collective turns that rank's hang into "Connection closed by
peer", and the doctor could no longer say where each rank is.
"""

from __future__ import annotations

import datetime
import os
import sys
import urllib.parse

import ddplab.doctor.records as records
from ddplab.doctor.ranks import patching, where
from ddplab.doctor.ranks import recorder as _recorder
from ddplab.doctor.ranks.cuda_on_cpu.marks import active as mapping_cuda

LOCAL = "DDPLAB_DOCTOR_LOCAL"  # "1": the doctor started these processes (not torchrun)
MODE_UNSAID = "DDPLAB_DOCTOR_MODE_UNSAID"  # "1" in rank 0's process until it says the mode
TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                      "ROLE_RANK", "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE", "MASTER_ADDR",
                      "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE")
STDLIB_ENV = ("os.py", "_collections_abc.py")
GROUPS: dict[int, dict] = {}  # id(ProcessGroup) -> {"ranks", "requested"}


def used_backend(requested):
    """What runs here: NCCL (alone or in a mapping) without a GPU per rank becomes gloo."""
    import torch

    if requested and "nccl" in str(requested).lower() and (
            mapping_cuda() or not torch.cuda.is_available()):
        return "gloo"
    return requested


def _text(backend) -> str | None:
    """A backend as the script named it (a string, or torch's ``Backend``), as plain text."""
    return None if backend is None else str(backend)


def nccl_rules(requested) -> bool:
    """Whether CPU tensors break this group's collectives: NCCL asked for, with no backend for
    the CPU beside it (``"cpu:gloo,cuda:nccl"`` takes both)."""
    text = str(requested or "").lower()
    return "nccl" in text and "cpu:" not in text


def say_mode(mode: records.Mode) -> None:
    """Rank 0's process tells the others what the script is, once."""
    if os.environ.get(MODE_UNSAID) == "1":
        os.environ[MODE_UNSAID] = "0"
        from ddplab.doctor.store import Store

        Store.connect().say_mode(mode)


def evidence_store():
    """The doctor's store (local runs), or torchrun's, reached as its ranks reach it."""
    from ddplab.doctor.store import ADDRESS, Store

    if os.environ.get(ADDRESS):
        return Store.connect()
    return Store.connect(f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")


def _rank_and_size(init_method, rank, world_size):
    if init_method and init_method.startswith("tcp://"):
        query = urllib.parse.parse_qs(urllib.parse.urlparse(init_method).query)
        rank = int(query.get("rank", [rank])[0])
        world_size = int(query.get("world_size", [world_size])[0])
    rank = rank if rank >= 0 else int(os.environ["RANK"])
    world_size = world_size if world_size >= 0 else int(os.environ["WORLD_SIZE"])
    return rank, world_size


def install() -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    def make_init(real):
        def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1,
                               rank=-1, store=None, group_name="", pg_options=None,
                               device_id=None, **more):
            rec = _recorder.RECORDER
            spot = where.line()
            say_mode(records.Mode.RANKS)
            if dist.is_initialized() and rec.counters.get("deferred-destroy"):
                patching.original(dist, "destroy_process_group")()  # a real re-init
            from ddplab.doctor.store import Store

            if os.environ.get(LOCAL) == "1" and store is None and not str(
                    init_method or "").startswith("file://"):
                rank, world_size = _rank_and_size(init_method, rank, world_size)
                doctor = Store.connect()
                group = f"group{rec.count('init')}/"
                if doctor.tcp.add(f"claims/{group}{rank}", 1) > 1:
                    rec.add(records.DuplicateRank(rank=rank, world_size=world_size,
                                                  pid=os.getpid(), **where.fields(spot)))
                    raise RuntimeError(f"rank={rank} (world_size={world_size}) was passed to "
                                       "init_process_group by another process already: each "
                                       "process needs a rank of its own")
                store = dist.PrefixStore(group, doctor.tcp)
                init_method = None
            wait = datetime.timedelta(seconds=rec.timeout + 30)
            with rec.blocking("init_process_group", spot):
                real(used_backend(backend), init_method=init_method, timeout=wait,
                     world_size=world_size, rank=rank, store=store, group_name=group_name,
                     pg_options=pg_options,
                     device_id=None if mapping_cuda() else device_id, **more)
            if rec.rank is None:
                rec.attach(rec.store or evidence_store(), dist.get_rank(), dist.get_world_size())
            rec.add(records.GroupInit(requested=_text(backend), used=_text(used_backend(backend)),
                                      backend=str(dist.get_backend()), **where.fields(spot),
                                      world_size=dist.get_world_size()))
        return init_process_group

    def make_new_group(real):
        def new_group(ranks=None, timeout=None, backend=None, *args, **kwargs):
            group = real(ranks, timeout, used_backend(backend), *args, **kwargs)
            GROUPS[id(group)] = {"ranks": sorted(ranks) if ranks is not None else None,
                                 "requested": backend}
            return group
        return new_group

    def make_destroy(real):
        def destroy_process_group(group=None):
            rec = _recorder.RECORDER
            if group is None or group is dist.GroupMember.WORLD:
                rec.counters["deferred-destroy"] = 1
                spot = where.line()
                rec.add(records.GroupDestroy(**where.fields(spot)))
                return None
            return real(group)
        return destroy_process_group

    for owner in (dist, c10d):
        patching.wrap(owner, "init_process_group", make_init)
        patching.wrap(owner, "new_group", make_new_group)
        patching.wrap(owner, "destroy_process_group", make_destroy)
    _watch_world_size_reads(dist)
    _watch_local_rank_option()


def _watch_local_rank_option() -> None:
    """An argparse ``--local_rank`` in the script's own code (``no-process-group``)."""
    import argparse

    def make_add_argument(real):
        def add_argument(self, *names, **kwargs):
            action = real(self, *names, **kwargs)
            named = [n for n in names if n.replace("-", "_") == "__local_rank"]
            spot = where.line()
            if named and spot is not None:
                default = kwargs.get("default")
                _recorder.RECORDER.add(records.LocalRankOption(
                    name=named[0], default=default if isinstance(
                        default, (int, str, float, type(None))) else repr(default),
                    file=spot[0], line=spot[1]))
            return action
        return add_argument

    patching.wrap(argparse._ActionsContainer, "add_argument", make_add_argument)


def _watch_world_size_reads(dist) -> None:
    """Whether the script's own code reads the world size before its first step: if it never
    does, its batch size, accumulation and LR cannot follow the world size (``lr-not-scaled``)."""

    def note(how):
        rec = _recorder.RECORDER
        if rec.steps or rec.records.get(records.WorldSizeRead.KIND):
            return
        caller = sys._getframe(2)
        while caller is not None and os.path.basename(caller.f_code.co_filename) in STDLIB_ENV:
            caller = caller.f_back  # os.environ.get(...) reads through Mapping.get
        if caller is None or not where.is_reader_file(caller.f_code.co_filename):
            return
        rec.add(records.WorldSizeRead(how=how, file=where.frame_line(caller)[0],
                                      line=caller.f_lineno))

    def make_get_world_size(real):
        def get_world_size(group=None):
            note("dist.get_world_size()")
            return real(group)
        return get_world_size

    def make_getitem(real):
        def __getitem__(self, key):
            if key == "WORLD_SIZE":
                note("os.environ['WORLD_SIZE']")
            return real(self, key)
        return __getitem__

    patching.wrap(dist, "get_world_size", make_get_world_size)
    patching.wrap(type(os.environ), "__getitem__", make_getitem)


def group_info(group) -> dict:
    """(ranks, backend asked for) of a group a collective runs on."""
    import torch.distributed as dist

    if group is None or group is dist.GroupMember.WORLD:
        init = _recorder.RECORDER.records.get(records.GroupInit.KIND, [])
        return {"ranks": None, "requested": init[-1].requested if init else None}
    return GROUPS.get(id(group), {"ranks": dist.get_process_group_ranks(group),
                                  "requested": None})
