"""The warnings DDP and torchrun print, made by a real torchrun run on this machine's CPU.

One ``torchrun --nproc-per-node 2`` (a c10d rendezvous on 127.0.0.1, gloo ranks, no
``OMP_NUM_THREADS`` in its environment) runs a script that makes each of them:

- torchrun's own ``Setting OMP_NUM_THREADS environment variable for each process to be 1``
  (``torch/distributed/run.py``, when the variable is unset and more than one process starts);
- DDP's reducer's ``find_unused_parameters=True was specified in DDP constructor, but did not
  find any unused parameters``: a model whose every parameter is used, wrapped with the flag
  (``Reducer::search_unused_parameters``, ``torch/csrc/distributed/c10d/reducer.cpp``: printed
  by C++ on the rank's stderr, once);
- ``Grad strides do not match bucket view strides``: a 1x1 convolution fed a ``channels_last``
  input, whose weight gradient comes out in the input's memory layout while DDP's bucket view
  is contiguous (a Python ``UserWarning`` raised from ``reducer.cpp``; on CPU only when the
  convolution runs on more than one thread, which picks the kernel that keeps the layout);
- torchrun's ``Sending process N closing signal SIGTERM``
  (``torch/distributed/elastic/multiprocessing/api.py``): rank 1 raises, and the agent stops
  rank 0, which is still running.

Each is read back from torchrun's stderr, line by line, as a terminal shows it.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import socket
import subprocess
import sys
import tempfile

from ddplab.common.checks import positive_number
from ddplab.common.results import Result

SCRIPT = """
import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

warnings.simplefilter("always")  # every rank prints its UserWarnings
dist.init_process_group("gloo")
torch.manual_seed(0)
# every parameter used, and the flag on: the reducer warns
ddp = DDP(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1)),
          find_unused_parameters=True)
for _ in range(2):
    ddp(torch.randn(8, 4)).sum().backward()
# a 1x1 convolution on a channels_last input: its weight's gradient is channels_last too (on
# CPU with 2 threads: on one, torch takes a kernel that returns a contiguous gradient)
torch.set_num_threads(2)
conv = DDP(nn.Sequential(nn.Conv2d(8, 16, 1), nn.ReLU(), nn.Conv2d(16, 4, 3)))
x = torch.randn(4, 8, 10, 10).to(memory_format=torch.channels_last)
conv(x).sum().backward()
# the fix: the model in channels_last before DDP is built, so the buckets take its layout
with warnings.catch_warnings(record=True) as fixed:
    warnings.simplefilter("always")
    model = nn.Sequential(nn.Conv2d(8, 16, 1), nn.ReLU(), nn.Conv2d(16, 4, 3))
    DDP(model.to(memory_format=torch.channels_last))(x).sum().backward()
print(f"channels_last before DDP: {len(fixed)} warnings", file=sys.stderr)
dist.barrier()
if dist.get_rank() == 1:
    raise SystemExit("rank 1 stops here")
time.sleep(60)  # rank 0 is still running when torchrun stops it
"""

# The warnings' texts as torch 2.13 prints them (the SIGTERM line with a process id of its own),
# by name; barrier's is printed on GPUs only and quoted from torch/distributed/distributed_c10d.py.
TEXTS = {
    "unused": "find_unused_parameters=True was specified in DDP constructor, but did not find "
              "any unused parameters in the forward pass. This flag results in an extra "
              "traversal of the autograd graph every iteration,  which can adversely affect "
              "performance. If your model indeed never has any unused parameters in the forward "
              "pass, consider turning this flag off. Note that this warning may be a false "
              "positive if your model has flow control causing later iterations to have unused "
              "parameters.",
    "strides": "Grad strides do not match bucket view strides. This may indicate grad was not "
               "created according to the gradient layout contract, or that the param's strides "
               "changed since DDP was constructed.  This is not an error, but may impair "
               "performance.",
    "omp": "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
           "to avoid your system being overloaded, please further tune the variable for optimal "
           "performance in your application as needed.",
    "sigterm": "Sending process 4242 closing signal SIGTERM",
    "barrier": "barrier(): using the device under current context. You can specify `device_id` "
               "in `init_process_group` to mute this warning.",
}
# Each one's entry in book/errors.md.
LABELS = {"unused": "errors-find-unused-warning", "strides": "errors-grad-strides",
          "omp": "errors-omp-num-threads", "sigterm": "errors-closing-signal",
          "barrier": "errors-barrier-device"}

# The warnings, by name: a part of the line that holds each (the whole text is quoted on the
# page from the line itself).
MARKS = {"omp": "Setting OMP_NUM_THREADS environment variable",
         "unused": "find_unused_parameters=True was specified in DDP constructor",
         "strides": "Grad strides do not match bucket view strides",
         "sigterm": "closing signal SIGTERM"}


@dataclasses.dataclass
class PrintedWarnings(Result):
    returncode: int  # torchrun's
    lines: dict  # name (MARKS) -> the lines of torchrun's stderr that hold it, as printed
    omp_message: str  # torchrun's warning, the text between its rows of stars
    fixed_warnings: int  # the strides warning, with the model in channels_last before DDP
    child_failed: bool  # torchrun ended with its ChildFailedError and the root cause's rank

    def first(self, name: str) -> str:
        """The first line that holds the warning ``name``; "" when none did."""
        return (self.lines.get(name) or [""])[0]

    def describe(self) -> str:
        return "\n".join(f"{name}: {len(self.lines[name])} line(s)" for name in MARKS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(timeout: float = 120.0) -> PrintedWarnings:
    """The script above under ``torchrun --nproc-per-node 2``; its warnings, by name."""
    positive_number("timeout", timeout)
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(GLOO_SOCKET_IFNAME="lo", PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "train.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        done = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
             "--nproc-per-node", "2", "--rdzv-backend", "c10d",
             "--rdzv-endpoint", f"127.0.0.1:{free_port()}", script],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            timeout=timeout, cwd=tmp)
    lines = done.stderr.splitlines()
    found = {name: [line for line in lines if mark in line] for name, mark in MARKS.items()}
    stars = [i for i, line in enumerate(lines) if set(line.strip()) == {"*"}]
    omp = " ".join(lines[stars[0] + 1:stars[1]]).strip() if len(stars) >= 2 else ""
    fixed = re.search(r"channels_last before DDP: (\d+) warnings", done.stderr)
    return PrintedWarnings.from_ranks(None, returncode=done.returncode, lines=found,
                                      omp_message=omp,
                                      fixed_warnings=int(fixed.group(1)) if fixed else -1,
                                      child_failed="ChildFailedError" in done.stderr and
                                      "rank      : 1" in done.stderr.split("Root Cause")[-1])


def in_torch_source(text: str, path: str) -> bool:
    """Whether torch's file ``path`` (under the installed ``torch/``) says ``text``, its string
    literals joined as Python joins adjacent ones."""
    import torch

    source = (pathlib.Path(torch.__file__).parent / path).read_text()
    joined = re.sub(r'"\s*\n\s*"', "", source)  # "...ends " \n "starts..." -> one literal
    return text in joined
