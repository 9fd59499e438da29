"""Run a training script as ``python script.py`` would, ended after its K-th optimizer step:
the plain run the doctor is timed against (``benchmarks/doctor.py``). One global optimizer
hook, nothing else of the doctor's.

    torchrun --nproc-per-node 2 benchmarks/plain_until.py K train.py [args]
"""

import os
import runpy
import sys

from torch.optim.optimizer import register_optimizer_step_post_hook

steps = {"taken": 0}
last = int(sys.argv[1])


def after(optimizer, args, kwargs):
    steps["taken"] += 1
    if steps["taken"] >= last:
        sys.stdout.flush()
        os._exit(0)  # every rank at the same step, as the doctor stops them


register_optimizer_step_post_hook(after)
script = sys.argv[2]
sys.argv = sys.argv[2:]
sys.path[0] = os.path.dirname(os.path.abspath(script))
runpy.run_path(script, run_name="__main__")
