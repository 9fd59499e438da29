"""Runs at the start of every Python process below a rank the doctor started (it is on their
PYTHONPATH): a process the script spawns (``mp.spawn``) is watched as the ranks the doctor
starts are. Other Python processes (multiprocessing's resource tracker, a tool the script
runs) are left alone."""

import os
import sys

if os.environ.get("DDPLAB_DOCTOR_CHILD") == "1" and "--multiprocessing-fork" in sys.argv:
    try:
        from ddplab.doctor.ranks import children

        children.start_spawned()
    except Exception:  # never stop the reader's process from starting
        pass
