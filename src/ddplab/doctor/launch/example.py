"""The doctor's example scripts (``examples/train.py`` with three mistakes, and
``train_fixed.py``), for the book's page and lab 8: copied into a folder of the reader's, as
their own script would be, and run there."""

from __future__ import annotations

import os
import shutil
import tempfile

# doctor/examples/, beside this module's folder doctor/launch/
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def path(name: str) -> str:
    return os.path.join(EXAMPLES, name)


def copy(name: str, folder: str) -> str:
    """``name`` copied into ``folder``; the copy's path."""
    return shutil.copy(path(name), os.path.join(folder, name))


def diagnose(name: str, **settings):
    """``name`` copied into a fresh folder and diagnosed there (what it writes stays there)."""
    from ddplab.doctor.launch.diagnose import diagnose as run

    folder = tempfile.mkdtemp(prefix="ddplab-doctor-example-")
    return run(copy(name, folder), cwd=folder, **settings)
