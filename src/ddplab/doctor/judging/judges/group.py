"""``duplicate-rank``: two processes passed the same rank to ``init_process_group``.

With no rank given, ``env://`` reads ``RANK`` and ``WORLD_SIZE`` from the environment
(``_env_rendezvous_handler``, torch/distributed/rendezvous.py:269 and :274 in torch 2.13), one
per process under torchrun. With ``rank=0`` in every process, run without the doctor's claim
(a blog post's script, 2 processes, gloo): each process's group waited for rank 1 and raised
``DistStoreError: wait timeout after 40000ms, keys: /group0//0//cpu//0/1``."""

from __future__ import annotations

import re

from ddplab.doctor.judging.judgement import Draft, found, not_applicable, passed
from ddplab.doctor.ranks.watch.group import DUPLICATE_RANK

FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def duplicate_rank(evidence, so_far):
    crash = evidence.crashed() or {}
    error = crash.get("error") or ""
    if DUPLICATE_RANK not in error:
        if evidence.used_backend() is None:
            return not_applicable("no process group was formed")
        return passed("every process joined the group with a rank of its own")
    rank = int(re.search(r"rank=(\d+)", error).group(1))
    frames = [(path, int(line)) for path, line in FRAME.findall(crash.get("traceback") or "")
              if "site-packages" not in path and "dist-packages" not in path]
    file, line = frames[-1] if frames else (None, None)
    return found(Draft(
        f"two processes passed rank={rank} to init_process_group: a rank "
        "written into the script is the same in every process, so no process takes the other "
        "ranks and the group never forms (each process waits for them until its store's "
        "timeout); torchrun gives each process its own RANK", {"rank": rank}, file, line))
