"""``duplicate-rank``: two processes passed the same rank to ``init_process_group``.

With no rank given, ``env://`` reads ``RANK`` and ``WORLD_SIZE`` from the environment
(``_env_rendezvous_handler``, torch/distributed/rendezvous.py:269 and :274 in torch 2.13), one
per process under torchrun. With ``rank=0`` in every process, run without the doctor's claim
(a blog post's script, 2 processes, gloo): each process's group waited for rank 1 and raised
``DistStoreError: wait timeout after 40000ms, keys: /group0//0//cpu//0/1``."""

from __future__ import annotations

import ddplab.doctor.records as records
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
