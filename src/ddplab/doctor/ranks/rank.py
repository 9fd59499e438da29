"""One process the doctor starts: ``python -m ddplab.doctor.ranks.rank``, with torchrun's
environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ...) and the doctor's
(``DDPLAB_DOCTOR_*``).

Rank 0's process runs the script at once. The others wait until it says what the script is:
one that joins a group itself (``mode`` = ``ranks``: they run it too, as torchrun's ranks
would) or one that starts its own ranks (``spawn``: they leave, and rank 0's process is the
script's launcher). After the script ends, stops or crashes, a rank publishes what it saw and
stays alive until every rank is done (``release``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import ddplab.doctor.records as records
from ddplab.doctor.messages import LauncherDone
from ddplab.doctor.ranks import children
from ddplab.doctor.ranks import recorder as _recorder
from ddplab.doctor.ranks.instrument import run_script
from ddplab.doctor.ranks.watch.group import MODE_UNSAID, say_mode
from ddplab.doctor.settings import Settings
from ddplab.doctor.store import MODE, Store
from ddplab.engine.lifeline import exit_with_parent

SCRIPT = "DDPLAB_DOCTOR_SCRIPT"
ARGS = "DDPLAB_DOCTOR_ARGS"


def fresh_random_state() -> None:
    """Seed torch (and numpy, if loaded) from the OS, as a new ``python`` process starts: a
    rank forked from the doctor's zygote inherits its random state, and an unseeded
    ``torch.randperm`` would then agree on every rank where torchrun's ranks disagree."""
    import torch

    torch.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()


def main() -> None:
    exit_with_parent()
    fresh_random_state()
    store = Store.connect()
    rank = int(os.environ["RANK"])
    role = Settings.current().role
    if rank != 0:
        while not store.wait(MODE, 5.0):
            pass
        if store.mode() != records.Mode.RANKS:
            os._exit(0)
    else:
        os.environ[MODE_UNSAID] = "1" if role == "rank" else "0"
    os.environ[children.CHILD] = "1"
    children.patch_process()
    rec = _recorder.RECORDER
    done = run_script(os.environ[SCRIPT], json.loads(os.environ[ARGS]))
    say_mode(records.Mode.NONE)  # neither joined a group nor spawned ranks (no-op once said)
    sys.stdout.flush()
    sys.stderr.flush()
    if rec.store is not None:  # a rank
        rec.publish(done)
        rec.wait_for_release()
    elif store.mode() == records.Mode.RANKS:  # a rank that failed before it joined the group
        store.send(dataclasses.replace(done, pid=os.getpid(), records=rec.records), rank)
    else:  # the launcher of spawned ranks, or a script that never joined a group
        store.send(LauncherDone(**vars(dataclasses.replace(done, records=rec.records))))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
