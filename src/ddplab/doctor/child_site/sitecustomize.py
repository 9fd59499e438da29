"""Runs at the start of every Python process below a rank the doctor started (it is on their
PYTHONPATH): a process the script spawns as a rank is watched as the ranks the doctor starts."""

import os

if os.environ.get("DDPLAB_DOCTOR_CHILD") == "1":
    try:
        from ddplab.doctor import children

        children.patch_process()
    except Exception:  # never stop the reader's process from starting
        pass
