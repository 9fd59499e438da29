"""Lab notebooks carry no outputs except those nbval checks (see scripts/clean_labs.py)."""

import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_lab_notebooks_keep_only_checked_outputs():
    labs = sorted(glob.glob(os.path.join(ROOT, "labs", "*.ipynb")))
    assert labs, "no lab notebooks found"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "clean_labs.py"),
                           "--check", *labs], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
