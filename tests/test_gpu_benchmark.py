"""benchmarks/gpu.py and its model: the GPT shapes' parameter counts by hand, and the
benchmark's CPU smoke run (the same code as on a GPU, tiny), whose record must be readable
by ``gpu_record`` and add up."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ddplab.common import gpt, gpu_record

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpt_shapes_count_their_parameters():
    """GPT-2 small: 12 blocks of (12 x 768^2 + 13 x 768) = 85,054,464, token embedding 50,257 x
    768 = 38,597,376, positions 1024 x 768 = 786,432, last LayerNorm 1,536: 124,439,808, the
    figure nanoGPT prints for gpt2 (with positions) and the "124M" of its name."""
    assert gpt.SHAPES["124M"].params == 12 * (12 * 768 ** 2 + 13 * 768) + 50257 * 768 \
        + 1024 * 768 + 2 * 768 == 124_439_808
    for shape in [*gpt.SHAPES.values(), *gpt.QUICK_SHAPES.values()]:
        with torch.device("meta"):
            model = gpt.GPT(shape)
        assert sum(p.numel() for p in model.parameters()) == shape.params  # tied: counted once


def test_a_new_gpt_predicts_every_token_about_equally():
    """Weights of std 0.02 give logits near 0, so the loss starts near ln(vocab)."""
    shape = gpt.QUICK_SHAPES["tiny"]
    torch.manual_seed(0)
    X, Y = gpt.random_batch(shape, 2, "cpu")
    loss = gpt.GPT(shape)(X, Y)
    assert loss.item() == pytest.approx(math.log(shape.vocab), rel=0.02)
    loss.backward()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU")
def test_without_a_gpu_it_says_so_and_measures_nothing():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "no CUDA GPU here" in done.stdout


def test_the_cpu_smoke_writes_a_record_that_adds_up(tmp_path):
    out = tmp_path / "smoke.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--cpu-smoke",
                           "--steps", "1", "--warmup", "1", "--compile-backend", "eager",
                           "--peak-tflops", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    record = gpu_record.GpuRecord("smoke", gpu_record.validate(data))
    assert record.machine["measured_by"] == "benchmarks/gpu.py --cpu-smoke"
    assert {(r["model"], r["mode"]) for r in record.rows} == {("tiny", "eager"),
                                                              ("tiny", "compiled")}
    for row in record.rows:
        tokens_per_s = 4 * 128 / (row["step_ms"] / 1e3)  # 4 sequences of 128 tokens
        assert row["mfu_percent"] == pytest.approx(
            100 * 6 * 544_256 * tokens_per_s / 1e12, rel=0.01, abs=0.006)
    # 4 x Linear(64, 64): 16,640 parameters in 8 tensors; Adam, DDP: 20 bytes per parameter
    # and 4 per tensor, 16 with the bucket view
    memory = data["memory"]
    assert memory["params"] == 16_640 and memory["allocator"] == "malloc"
    expected = {False: 20 * 16_640 + 32, True: 16 * 16_640 + 32}
    for row in memory["rows"]:
        assert row["calculator_mib"] == round(expected[row["bucket_view"]] / 2 ** 20, 2)
        assert row["step_peak_mib"] is None  # malloc keeps no peak
