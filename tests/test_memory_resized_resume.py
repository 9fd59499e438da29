"""A sharded checkpoint saved by FSDP on 2 ranks, loaded on 3 (``memory.resized_resume``):
the model and Adam's state, gathered whole, are what was saved, entry for entry."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ddplab.chapters.memory import resized_resume
from ddplab.chapters.memory.sharded_checkpoint import LR


def test_saved_on_two_ranks_loads_on_three_exactly():
    r = resized_resume.run(saved_world_size=2, loaded_world_size=3, steps=2)
    assert r.max_model_diff_per_rank == [0.0] * 3
    assert r.max_optimizer_diff_per_rank == [0.0] * 3
    assert r.fresh_diff > 1e-3  # the loading model was not the saved one before its load
    # Adam: exp_avg and exp_avg_sq per parameter entry, and a step count per parameter
    assert r.optimizer_entries > 2 * r.parameters
    assert r.lr_loaded_per_rank == [r.lr_saved] * 3
    assert r.lr_saved == pytest.approx(LR * resized_resume.DECAY)


def test_a_world_size_that_does_not_divide_the_batch_is_refused():
    with pytest.raises(ValueError, match="divide"):
        resized_resume.run(loaded_world_size=5)


_RNG_SAVE = """
import os, random, sys
import numpy as np
import torch
import torch.distributed as dist
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
path = sys.argv[1]
{fragment}
print(sorted(torch.load(os.path.join(path, "rng_0.pt"), weights_only=False)))
"""


def test_the_pages_rng_save_runs_on_a_cpu_rank(tmp_path):
    """The memory page's save of each rank's random state, as the page shows it (from ``rng =``
    to the barrier), on a one-rank gloo group without a GPU: the CUDA state is saved only
    where there is one (``torch.cuda.get_rng_state`` raises on CPU ranks)."""
    page = (Path(__file__).resolve().parent.parent / "book" / "memory.md").read_text()
    fragment = re.search(r"^rng = \{.*?^dist\.barrier\(\)$", page, re.M | re.S).group(0)
    done = subprocess.run([sys.executable, "-c", _RNG_SAVE.format(fragment=fragment),
                           str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = ["numpy", "python", "torch"] + (["cuda"] if torch.cuda.is_available() else [])
    assert done.stdout.split("\n")[-2] == str(sorted(expected))
