"""A script that calls ddplab at its top level, without ``if __name__ == "__main__":``.

Rank processes start from a fresh interpreter that imports the caller's main module (as
``multiprocessing`` does with the forkserver and spawn methods), so the script's top level runs
again in every rank, and its ``ddplab.run`` with it. ddplab refuses that call
(``check_call`` in ``ddplab/engine/cluster.py``) and the caller gets a ``RankError`` naming the
guard.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile

SCRIPT = """\
import ddplab
from ddplab.chapters.training_loop import evaluation
print(ddplab.run(evaluation.gather_unequal, 2))
"""


def unguarded_run(timeout: float = 120.0) -> tuple[int, str]:
    """(exit code, stderr) of ``SCRIPT`` run as a script in a fresh interpreter."""
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "train.py"
        path.write_text(SCRIPT)
        done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                              timeout=timeout, cwd=folder)
    return done.returncode, done.stderr


def caller_error(stderr: str) -> str:
    """The caller's own error line (the last ``RankError`` line of its traceback)."""
    return [line for line in stderr.splitlines() if "RankError: " in line][-1]
