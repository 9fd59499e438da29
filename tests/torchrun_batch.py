"""Several ``python -m ddplab COMMAND ... --json`` in one torchrun launch (``tests/conftest.py``,
``ddplab_json(..., torchrun=2)``): starting torchrun and a process per rank, each importing
torch, costs about 10 s of a 2-core machine, and each test that compared a command under
torchrun with the local pool paid it. The group torchrun's processes form on the first command
is kept for the next (``ddplab.engine.torchrun.run``), as it would be in a reader's script.

    torchrun --standalone --nproc-per-node 2 tests/torchrun_batch.py COMMANDS_JSON OUT_PREFIX

Each rank writes ``OUT_PREFIX.rank{RANK}.json``: for each command (its arguments joined by
spaces), its exit status and what it printed, so the caller can check that only rank 0 prints.
"""

import contextlib
import io
import json
import os
import sys

from ddplab.__main__ import main


def run_all(commands: list[list[str]], out_prefix: str) -> None:
    printed = {}
    for args in commands:
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            code = main(args)
        printed[" ".join(args)] = {"code": code, "stdout": buffer.getvalue()}
    with open(f"{out_prefix}.rank{os.environ['RANK']}.json", "w") as f:
        json.dump(printed, f)


if __name__ == "__main__":
    run_all(json.loads(sys.argv[1]), sys.argv[2])
