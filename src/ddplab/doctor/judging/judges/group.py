"""``duplicate-rank``: two processes passed the same rank to ``init_process_group``.

With no rank given, ``env://`` reads ``RANK`` and ``WORLD_SIZE`` from the environment
(``_env_rendezvous_handler``, torch/distributed/rendezvous.py:269 and :274 in torch 2.13), one
per process under torchrun. With ``rank=0`` in every process, run without the doctor's claim
(a blog post's script, 2 processes, gloo): each process's group waited for rank 1 and raised
``DistStoreError: wait timeout after 40000ms, keys: /group0//0//cpu//0/1``."""

from __future__ import annotations

import ddplab.doctor.records as records
from ddplab.doctor.judging import error_index
from ddplab.doctor.judging.check import ANY_CRASH, Check
from ddplab.doctor.judging.judgement import Problem, found, not_applicable, passed


def duplicate_rank(evidence, earlier):
    claims = evidence.recorded_before_group(records.DuplicateRank)
    if not claims:
        if evidence.used_backend() is None:
            return not_applicable("no process group was formed")
        return passed("every process joined the group with a rank of its own")
    claim = claims[0].record
    return found(Problem(
        f"two processes passed rank={claim.rank} to init_process_group: a rank "
        "written into the script is the same in every process, so no process takes the other "
        "ranks and the group never forms (on gloo each process waits for them until its "
        "store's timeout; on NCCL init_process_group returns and the first collective waits "
        "in NCCL's bootstrap, with no timeout); torchrun gives each process its own RANK",
        {"rank": claim.rank, "world_size": claim.world_size, "pid": claim.pid},
        claim.file, claim.line))


def no_process_group(evidence, earlier):
    """The script ran to its end (or the doctor's stop) and never called init_process_group:
    run by torchrun, every process would train alone, on the whole dataset. An argparse
    ``--local_rank`` in the script is the usual why: torchrun passes none (it sets
    ``LOCAL_RANK``), so its default keeps the script undistributed."""
    run = evidence.run
    if run.mode != records.Mode.NONE:
        return not_applicable("the script joined a process group or started its own ranks")
    if not run.launcher or run.launcher.outcome == records.Outcome.CRASHED:
        return not_applicable("the script failed before it could join a group")
    options = evidence.launcher_records(records.LocalRankOption)
    if options:
        option = options[0]
        return found(Problem(
            f"the script ran to its end without joining a process group: its {option.name} "
            f"option (default {option.default!r}) is never given by torchrun, which sets "
            "LOCAL_RANK in the environment instead, so every process trains alone on the "
            "whole dataset", {"option": option.name, "default": option.default},
            option.file, option.line))
    return found(Problem(
        "the script ran to its end without joining a process group "
        "(init_process_group was never called): under torchrun every process would train "
        "alone on the whole dataset", {}, None, None))


FIX_RANK = """\
# no rank= or world_size=: torchrun's RANK and WORLD_SIZE, one rank per process
dist.init_process_group()  # or keep the backend your script names: ("gloo"), ("nccl")
# with none, torch 2.13 takes the backend of the accelerator it finds: NCCL alone on a
# CUDA machine, gloo where there is none (BackendConfig in distributed_c10d.py)
local_rank = int(os.environ["LOCAL_RANK"])  # this process's GPU on its node, if any"""


DUPLICATE_RANK = Check(
    "duplicate-rank", "error",
    "each process passes init_process_group a rank of its own",
    "running-torchrun",
    FIX_RANK, duplicate_rank, explains=ANY_CRASH)


NO_PROCESS_GROUP = Check(
    "no-process-group", "error",
    "a script run as torchrun runs it joins a process group",
    error_index.NO_GROUP, error_index.FIX_LOCAL_RANK, no_process_group)
