"""The printouts the pages show fit the book's column: at 1280 px an output block holds 100
characters a line, and a wider one scrolls sideways in its box (the browser check fails it).
Each formatter here is fed the numbers a page prints, made larger where a number's width can
grow (slower machines, more ranks, a longer list); no run, no process group. The doctor's
report is measured in ``tests/test_doctor_checks.py``."""

from __future__ import annotations

import numpy as np
import pytest

from ddplab.chapters.memory import allocator_count
from ddplab.chapters.time_cost import (
    accumulation,
    calibration,
    cluster_prediction,
    compression,
    fp16_overflow,
    step_time,
    utilisation,
)
from ddplab.chapters.training_loop import loader_workers, torch_compile
from ddplab.common import gpu_record, timed_step

COLUMNS = 100


def fits(text: str) -> None:
    widest = max(text.splitlines(), key=len)
    assert len(widest) <= COLUMNS, f"{len(widest)} columns: {widest}"


def phases(step_ms: float) -> dict:
    """One rank's iteration of ``step_ms``, split as timed_step splits one, in seconds."""
    s = step_ms / 1e3
    return {"step": s, "forward": 0.1 * s, "backward": 0.5 * s, "waiting": 0.3 * s,
            "optimizer": 0.1 * s}


@pytest.mark.parametrize("step_ms", [17.3, 126.8, 12_345.6])
def test_step_times(step_ms):
    runs = [step_time.StepTime((512,) * 17, w, 128, None, ddp, 4_202_496,
                               [[phases(step_ms)] for _ in range(w)])
            for w in (1, 2, 4, 64) for ddp in (False, True)]
    table = step_time.describe_breakdown(runs)
    fits(table)
    assert len(table.splitlines()) == 1 + len(runs) and "64 ranks, no communication" in table
    for alone, ddp in zip(runs[::2], runs[1::2]):
        fits(step_time.describe_pair((alone, ddp)))


def test_phase_table_of_the_buckets_page():
    class Run:
        def __init__(self, step_ms):
            self.step = phases(step_ms)

        def median(self, phase):
            return self.step[phase]

    names = ("no communication", "naive", "one bucket (cap 1000)", "DDP default",
             "tiny buckets (cap 0.001)")
    table = timed_step.table({name: Run(10_000.0) for name in names})
    fits(table)
    assert table.splitlines()[1].split()[-5:] == ["10000.0", "1000.0", "5000.0", "3000.0",
                                                  "1000.0"]


def test_accumulation_with_each_mistake():
    grads = np.full((2, 5), 4.0)
    for mistake in accumulation.MISTAKES:
        result = accumulation.Accumulation(64, 128, 16, mistake, list("abcde"), grads,
                                           np.ones(5), [0] * 15 + [12], [12] * 16)
        fits(result.describe())


def test_compression_refused_and_overflow():
    refused = ("TypeError: BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+ "
               "or XPU and XCCL")
    iterations = [{"bytes_sent": 98_304, "calls": 3, "seconds": 12.3456}] * 4
    for hook in compression.HOOKS:
        fits(compression.Compression(hook, 64, 1_313_626_112, 5_254_504_448, refused,
                                     iterations, 2.85e-1).describe())
    fits(fp16_overflow.Overflow(70_000_000.0, 64, 70_000_000.0, float("inf")).describe())


def test_calibration():
    check = calibration.Calibration(4_202_496, 32, 383e-6, 1.52e9, 13.67e9,
                                    {1: 0.65e-3, 2: 1.13e-3, 4: 2.5e-3, 8: 5e-3},
                                    {1: 1.7e-3, 2: 5.3e-3, 4: 9e-3, 8: 20e-3},
                                    {1: 0.030, 2: 0.067, 4: 1.3, 8: 12.5}, 2)
    fits(check.describe())


def test_gpu_records_and_the_cluster_model():
    for name in gpu_record.names():
        fits(utilisation.describe_record(name))
        fits(allocator_count.recorded(name).describe())
    for global_batch in (1024, 64):
        fits(cluster_prediction.describe_curves(cluster_prediction.scaling_curves(
            1.3e9, global_batch_size=global_batch, batch_size=4)))


def test_compile_and_loader_orders():
    for outside in (False, True):
        for kind in ("sequential", "module"):
            fits(torch_compile.Compile(64, 0.001, False, outside, kind, 12, 34,
                                       "_orig_mod.layers.0.weight", 40, [2**20 + 17] * 40,
                                       7.5e-09).describe())
    fits(loader_workers.Orders(64, list(range(9)), [[[0]]] * 9).describe())
