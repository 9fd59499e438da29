"""The reference folder, shared by the N-rank run, the reference run and the doctor: which file
holds what, written and read past the doctor's own file watchers.

    plan.json                     what the doctor tells the reference run (``plan``)
    run/init.pt                   rank 0's model state as DDP wrapped it
    run/batches{k}.rank{r}.pt     the batches rank r trained on before optimizer step k
    run/state{k}.rank{r}.pt       rank r's parameters and learning rates after step k
    run/lr{k}.rank{r}.json        rank r's learning rates at step k (each group's)
    run/notes.rank{r}.json        what the rank could not record, what it switched off
    reference/state{k}.rank0.pt   the same, of the one-process run
    reference/own_lr{k}.rank0.json  the learning rates it set itself before step k
    reference/notes.rank0.json

Files, not the doctor's store: a step's batches and parameters are megabytes, the store's
messages a few kilobytes. The folder lives in the doctor's temporary folder and goes with it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os

RUN, REFERENCE = "run", "reference"
PLAN = "plan.json"


def path(folder: str, side: str, what: str, step: int | None, rank: int) -> str:
    number = "" if step is None else str(step)
    suffix = "json" if what in ("notes", "lr", "own_lr") else "pt"
    return os.path.join(folder, side, f"{what}{number}.rank{rank}.{suffix}")


def init_path(folder: str) -> str:
    return os.path.join(folder, RUN, "init.pt")


# While inside, the doctor's own file watchers record nothing: these writes are the doctor's,
# not the reader's. The ranks' watchers set it to their pause (``watch.batches.install``); the
# doctor's own process watches nothing.
quiet = contextlib.nullcontext


def save(obj, file: str) -> int:
    """``torch.save`` of ``obj`` to ``file`` (through a buffer: ``io.FileIO`` is below the
    scratch folder's wrappers); the bytes written."""
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    data = buffer.getvalue()
    with quiet():
        os.makedirs(os.path.dirname(file), exist_ok=True)
        with io.FileIO(file + ".part", "w") as f:
            f.write(data)
        os.replace(file + ".part", file)
    return len(data)


def load(file: str):
    """What ``save`` wrote (the doctor's own files: not only tensors, hence weights_only off)."""
    import torch

    with quiet(), io.FileIO(file, "r") as f:
        data = f.read()
    return torch.load(io.BytesIO(data), weights_only=False)


def write_json(value, file: str) -> None:
    with quiet():
        os.makedirs(os.path.dirname(file), exist_ok=True)
        with io.FileIO(file + ".part", "w") as f:
            f.write(json.dumps(value).encode())
        os.replace(file + ".part", file)


def read_json(file: str, default=None):
    if not os.path.exists(file):
        return default
    with quiet(), io.FileIO(file, "r") as f:
        return json.loads(f.read().decode())
