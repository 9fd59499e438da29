"""The GPU record the book reads: its arithmetic checked against the numbers it holds.

The first record holds the first H100 run's measurements. Its MFU column is 6 x params x tokens/s /
989 TFLOP/s, tokens/s = batch x 1024 / step time; both the step times and the MFUs are printed
rounded to 0.1, so the MFU worked out again from a step time may differ from the printed one by
half a unit of the last place (0.05 points) plus what the step's rounding moves it by
(MFU x 0.05 / step ms). A worked row: 124 M, 16 x 1024 tokens in 125.6 ms is 130,446
tokens/s; 6 x 124,439,808 x 130,446 / 989e12 = 9.85%, printed 9.8.
"""

import json

import pytest

from ddplab.chapters.memory import allocator_count, calculator
from ddplab.common import gpt, gpu_record

H100 = "h100-2026-11-25"
H200 = "h200-2026-11-26"  # benchmarks/gpu.py's own run, figures to 0.01


def test_the_first_record_says_where_it_comes_from():
    record = gpu_record.load(H100)
    m = record.machine
    assert (m["gpu"], m["driver"], m["torch"], m["date"]) == (
        "NVIDIA H100 80GB HBM3", "580.159.04", "2.11.0+cu130", "2026-11-25")
    assert m["measured_by"] == "recorded from a run reported to the project"
    assert record.origin == ("measured on one NVIDIA H100 80GB HBM3, 2026-11-25, "
                             "recorded from a run reported to the project")


def test_the_records_mfu_is_six_params_tokens_per_second_over_peak():
    record = gpu_record.load(H100)
    assert record.data["peak_flops"] == 989e12
    assert len(record.rows) == 6
    worked = next(r for r in record.rows if r["model"] == "124M" and r["mode"] == "eager")
    assert record.mfu_from_step(worked) == pytest.approx(
        100 * 6 * 124_439_808 * (16 * 1024 / 0.1256) / 989e12)
    for row in record.rows:
        rounding = 0.05 + row["mfu_percent"] * 0.05 / row["step_ms"] + 1e-9
        assert abs(record.mfu_from_step(row) - row["mfu_percent"]) <= rounding, row
    # a wrong peak (the 1979 TFLOP/s sparse figure) or a forgotten factor breaks it
    halved = {**record.data, "peak_flops": 1979e12}
    assert abs(gpu_record.GpuRecord("x", halved).mfu_from_step(worked) - 9.8) > 4


def test_the_h200_record_names_its_card_and_its_mfu_follows_from_its_steps():
    """benchmarks/gpu.py rounds step times and MFUs to 0.01: the MFU worked out again from a
    step lies within 0.005 points plus what the step's rounding moves it by. A worked row:
    124 M compiled, 16 x 1024 tokens in 36.68 ms: 6 x 124,439,808 x 446,674 / 989e12 = 33.72%."""
    record = gpu_record.load(H200)
    assert record.origin.startswith("measured on one NVIDIA H200, 2026-11-26, benchmarks/gpu.py")
    assert record.data["peak_flops"] == 989e12 and len(record.rows) == 6
    worked = next(r for r in record.rows if r["model"] == "124M" and r["mode"] == "compiled")
    assert record.mfu_from_step(worked) == pytest.approx(33.72, abs=0.005)
    for row in record.rows:
        rounding = 0.005 + row["mfu_percent"] * 0.005 / row["step_ms"] + 1e-9
        assert abs(record.mfu_from_step(row) - row["mfu_percent"]) <= rounding, row
        assert row["params"] == gpt.SHAPES[row["model"]].params
    # its memory rows were counted before the allocator's lazy frees were waited for: the
    # record says so, and the book reads the H100's memory by name instead
    assert "off by what the previous variant left" in record.data["memory"]["note"]


def test_the_h200_memory_rows_measured_after_the_fix_equal_the_calculator():
    """Re-measured on one H200 after allocator_count waited for NCCL's finished collectives and
    warmed cuBLAS: each row is the calculator's bytes to the MiB's hundredth (the rows of
    2026-11-26 were off by +321 and -256 MiB), and the memory page reads this record."""
    record = gpu_record.load("h200-2026-11-28")
    assert record.origin.startswith("measured on one NVIDIA H200, 2026-11-28, benchmarks/gpu.py")
    assert gpu_record.load().name == record.name  # the newest: allocator_count.recorded()
    rows = record.data["memory"]["rows"]
    assert [r["allocated_mib"] for r in rows] == [1280.31, 1024.25, 1024.25]
    assert all(r["allocated_mib"] == r["calculator_mib"] for r in rows)
    assert "note" not in record.data["memory"]


def test_the_records_model_sizes_are_the_gpt_shapes():
    record = gpu_record.load(H100)
    for row in record.rows:
        shape = gpt.SHAPES[row["model"]]
        assert (row["layers"], row["width"], row["heads"]) == (
            shape.layers, shape.width, shape.heads)
        assert row["params"] == shape.params


def test_compiled_beats_eager_at_every_size_and_mfu_rises_with_size():
    record = gpu_record.load(H100)
    eager, compiled = record.points("eager"), record.points("compiled")
    assert [u for _, u in eager] == [0.098, 0.13, 0.21]
    assert all(c > e for (_, c), (_, e) in zip(compiled, eager))
    assert [u for _, u in compiled] == sorted(u for _, u in compiled)
    with pytest.raises(ValueError, match="mode must be one of"):
        record.points("jit")


def test_the_memory_figures_beside_the_calculator():
    """4 x Linear(4096, 4096): 4 x (4096^2 + 4096) = 67,125,248 parameters in 8 tensors. DDP,
    Adam, fp32: 4 + 4 + 4 (buckets) + 8 bytes per parameter + 4 per tensor = 1280.3 MiB;
    16 bytes + 32 with the bucket view = 1024.25 MiB."""
    memory = gpu_record.load(H100).data["memory"]
    assert memory["params"] == 4 * (4096 * 4096 + 4096) == 67_125_248
    assert memory["allocator"] == "cuda"
    for row in memory["rows"]:
        by_category = calculator.bytes_per_rank(memory["params"], "adam", "ddp", 1,
                                                bucket_view=row["bucket_view"],
                                                tensors=memory["parameter_tensors"])
        hand = (16 if row["bucket_view"] else 20) * 67_125_248 + 4 * 8
        assert sum(by_category.values()) == hand
        assert row["calculator_mib"] == pytest.approx(hand / 2 ** 20, abs=0.05)
    view = {row["bucket_view"]: row["allocated_mib"] for row in memory["rows"]}
    assert view[False] > view[True]


def test_load_picks_the_newest_and_refuses_what_is_not_a_record(tmp_path, monkeypatch):
    data = json.loads((gpu_record.RECORDS / f"{H100}.json").read_text())
    newer = {**data, "machine": {**data["machine"], "date": "2027-01-02"}}
    (tmp_path / "a-newer.json").write_text(json.dumps(newer))
    (tmp_path / f"{H100}.json").write_text(json.dumps(data))
    monkeypatch.setattr(gpu_record, "RECORDS", tmp_path)
    assert gpu_record.load().name == "a-newer"
    with pytest.raises(ValueError, match="no GPU record 'nope'"):
        gpu_record.load("nope")
    broken = {k: v for k, v in data.items() if k != "peak_flops"}
    broken["machine"] = {k: v for k, v in data["machine"].items() if k != "driver"}
    with pytest.raises(ValueError, match="peak_flops, machine.driver"):
        gpu_record.validate(broken)


def test_the_memory_page_sets_the_record_beside_the_calculator():
    shown = allocator_count.recorded(H100)
    assert [r["calculator_mib"] for r in shown.rows] == pytest.approx(
        [r["recorded_calculator_mib"] for r in shown.rows], abs=0.05)  # printed to 0.1
    assert shown.ratios() == pytest.approx([1345.3 / 1280.31, 1.0], abs=1e-4)
    assert "cuda MiB" in shown.describe() and shown.allocator == "cuda"
