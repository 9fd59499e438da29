"""The doctor's error index (``ddplab.doctor.judging.error_index``) against the book's: every
entry is a section of book/errors.md whose heading quotes the message, its fix is Python, and
each message is made here by torch itself and named with its entry."""

from __future__ import annotations

import pathlib
import re

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from ddplab.doctor.judging import error_index
from ddplab.doctor.messages import Crash

ERRORS = pathlib.Path(__file__).parent.parent / "book" / "errors.md"


def sections() -> dict:
    """label -> the section's text, heading first."""
    text = ERRORS.read_text()
    parts = re.split(r"^\((errors-[\w-]+)\)=\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_entry_is_a_section_of_the_error_index():
    found = sections()
    for entry in error_index.ENTRIES:
        heading = found[entry.label].splitlines()[0]
        assert heading.startswith("## ") and any(t in heading for t in entry.texts), heading
        compile(entry.fix, entry.label, "exec", dont_inherit=True)
    assert error_index.NO_GROUP in {e.label for e in error_index.ENTRIES}
    compile(error_index.FIX_LOCAL_RANK, error_index.NO_GROUP, "exec", dont_inherit=True)


def message(make) -> str:
    try:
        make()
    except Exception as exc:  # the message torch gives
        return f"{type(exc).__name__}: {exc}"
    raise AssertionError("no error")


def with_group(make):
    """``make()`` inside a one-rank gloo group, torn down after."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        return make()
    finally:
        dist.destroy_process_group()


def sync_batchnorm_forward():
    nn.SyncBatchNorm(3).train()(torch.randn(4, 3))


def ddp_of_sync_batchnorm():
    nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(3, 3), nn.SyncBatchNorm(3)))


MADE = {  # label -> how torch makes its message here
    "errors-sampler-shuffle": [lambda: DataLoader(
        range(8), shuffle=True, sampler=DistributedSampler(range(8), num_replicas=2, rank=0))],
    "errors-state-dict-prefix": [lambda: nn.Linear(2, 2).load_state_dict(
        {f"module.{k}": v for k, v in nn.Linear(2, 2).state_dict().items()})],
    "errors-sync-batchnorm-cpu": [lambda: with_group(sync_batchnorm_forward),
                                  lambda: with_group(ddp_of_sync_batchnorm)],
    "errors-no-cuda": [lambda: torch.zeros(1, device="cuda"),
                       lambda: torch.cuda.set_device(0)],
    "errors-local-rank": [lambda: torch.device("cuda", -1),  # any machine
                          lambda: torch.device(f"cuda:{None}")],
}


@pytest.mark.parametrize("label", sorted(MADE))
def test_torchs_own_message_is_named_with_its_entry(label):
    if label == "errors-no-cuda" and torch.cuda.is_available():
        pytest.skip("the messages of a machine without GPUs")
    assert {e.label for e in error_index.ENTRIES} == set(MADE)
    for make in MADE[label]:
        said = message(make)
        entry = error_index.match(Crash("", said, ""))
        assert entry is not None and entry.label == label, said
