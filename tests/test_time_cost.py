"""The time-cost chapter's experiments against references this test computes itself: no_sync
accumulation against one process, hook bytes against tensor sizes, bucket counts against DDP's
recorded buckets, the bandwidth figures against their definitions. Timing is checked for what
must happen (only DDP waits after its last gradient), never for speed.

The small MLP 8 -> 64 -> 32 -> 4 has 2788 float32 parameters (11152 bytes): 0.weight 64 x 8,
0.bias 64, 2.weight 32 x 64, 2.bias 32, 4.weight 4 x 32, 4.bias 4. PowerSGD at rank 1 sends a
matrix n x m as P (n) and Q (m) when (n + m) * 2 < n * m, else whole, and 1-D tensors whole:
(64 + 8) + 64 + (32 + 64) + 32 + (4 + 32) + 4 = 304 floats = 1216 bytes.
"""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import ddplab_json
from ddplab.chapters.buckets import buckets
from ddplab.chapters.time_cost import (
    accumulation,
    accumulation_time,
    allreduce,
    bucket_size,
    compression,
    fp16_overflow,
    latency_fit,
    plots,
    scaling,
    step_time,
)
from ddplab.common import mlp

SMALL = (8, 64, 32, 4)
SMALL_BYTES = 11152


def one_process_grad(layers, world_size, batch_size, micro_batches, seed):
    """Plain torch, no DDP: the mean loss over every sample of every rank and micro-batch."""
    model = mlp.make_model(layers, seed)
    parts = [mlp.make_batch(layers, batch_size, world_size, seed, m) for m in range(micro_batches)]
    X = torch.cat([p[0] for p in parts])
    y = torch.cat([p[1] for p in parts])
    F.mse_loss(model(X), y).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()]).numpy()


# ---------------------------------------------------------------- accumulation


@pytest.mark.parametrize("world_size, micro_batches", [(2, 3), (3, 2)])
def test_no_sync_accumulation_is_one_process_on_the_global_batch(world_size, micro_batches):
    result = accumulation.run(world_size=world_size, batch_size=4, micro_batches=micro_batches,
                              seed=5, layers=SMALL)
    reference = one_process_grad(SMALL, world_size, 4, micro_batches, seed=5)
    assert result.global_batch_size == world_size * 4 * micro_batches
    np.testing.assert_allclose(result.grads, [reference] * world_size, atol=1e-6)
    last = one_process_grad(SMALL, world_size, 4, 1, seed=5)  # one micro-batch only
    assert np.abs(last - reference).max() > 1e-3  # so the comparison above can fail
    # The small model is one bucket: one all-reduce with no_sync, one per micro-batch without.
    assert result.launches == [0] * (micro_batches - 1) + [1]
    assert result.launches_without_no_sync == [1] * micro_batches


def test_the_two_mistakes_show_by_their_effect():
    reference = one_process_grad(SMALL, 2, 4, 3, seed=1)
    undivided = accumulation.run(2, 4, 3, seed=1, layers=SMALL, mistake="loss not divided")
    np.testing.assert_allclose(undivided.accumulated_grad, 3 * reference, rtol=1e-5, atol=1e-6)
    assert undivided.allreduces == 1
    outside = accumulation.run(2, 4, 3, seed=1, layers=SMALL, mistake="forward outside no_sync")
    np.testing.assert_allclose(outside.accumulated_grad, reference, atol=1e-6)
    assert outside.launches == [1, 1, 1]  # all-reduced anyway


def test_accumulation_timing_times_every_count_both_ways_and_says_done():
    calls = []
    timing = accumulation_time.run(world_size=2, batch_size=2, micro_batches=(1, 3),
                                   layers=SMALL, iterations=1,
                                   progress=lambda *args: calls.append(args))
    assert calls == [(0, 2, "1 micro-batches"), (1, 2, "3 micro-batches"), (2, 2, "done")]
    assert len(timing.no_sync_s) == len(timing.every_micro_batch_s) == 2
    assert timing.describe().splitlines()[3].split()[:2] == ["3", "12"]  # 3 x 2 x 2 ranks


def test_without_warmup_the_step_is_ddps_first_and_all_reduces_one_bucket():
    result = accumulation.run(2, 4, 2, layers=(64, 1024, 1024, 10), warmup=False)
    assert result.launches == [0, 1]
    warm = accumulation.run(2, 4, 2, layers=(64, 1024, 1024, 10))
    assert warm.launches == [0, 2]  # rebuilt: 1 MiB first bucket, then the rest


# ---------------------------------------------------------------- compression


def test_hook_bytes_are_the_tensor_sizes():
    sent = {hook: compression.run(2, hook, layers=SMALL, batch_size=4).bytes_sent
            for hook in compression.HOOKS}
    assert sent == {"none": SMALL_BYTES, "fp16": SMALL_BYTES // 2, "bf16": SMALL_BYTES // 2,
                    "powersgd": 1216}


def test_errors_of_the_averaged_gradient():
    results = {hook: compression.run(2, hook, layers=SMALL, batch_size=4)
               for hook in compression.HOOKS}
    assert results["none"].grad_rel_error < 1e-6
    assert 0 < results["fp16"].grad_rel_error < 1e-2
    assert 0 < results["bf16"].grad_rel_error < 1e-1
    assert results["powersgd"].grad_rel_error > results["fp16"].grad_rel_error
    assert results["fp16"].refused is None
    # DDP accepts bf16_compress_hook by name only from a build with CUDA and NCCL >= 2.10
    # (_check_comm_hook, torch/nn/parallel/distributed.py), whatever the ranks' device: a CPU
    # build always refuses it; a CUDA build took it on a CPU machine (PyPI's torch 2.11). Either
    # way the hook ran (bytes and error above), through the wrapper when refused.
    if torch.version.cuda is None and torch.version.hip is None:
        assert "NCCL" in results["bf16"].refused
    else:
        assert results["bf16"].refused is None or "NCCL" in results["bf16"].refused


def test_the_fp16_hook_casts_before_it_divides():
    over = fp16_overflow.run(value=70000.0, world_size=2)  # above 65504, the mean fits
    assert over.exact == 70000.0 and over.fp16_hook == float("inf")
    assert fp16_overflow.run(value=60000.0, world_size=2).fp16_hook == 60000.0


# ---------------------------------------------------------------- step time and buckets


def test_only_ddp_waits_after_its_last_gradient():
    alone, ddp = step_time.paired(world_size=2, batch_size=4, layers=SMALL, iterations=3)
    assert len(ddp.ranks) == 2 and all(len(r) == 3 for r in ddp.ranks)
    assert not alone.communicate and ddp.communicate
    # Without DDP backward() returns right after the last gradient; with DDP it waits for the
    # all-reduce of the last bucket (every all-reduce on gloo takes tens of microseconds).
    assert alone.median("waiting") < ddp.median("waiting")
    assert ddp.median("waiting") > 10e-6


def test_both_chapters_report_the_slowest_ranks_step_at_the_median_iteration():
    """One step for every chapter: worked out here from the raw records, not through
    timed_step's helpers. Per iteration the slowest rank's step (start to optimizer end), the
    middle of three; its four phases add up to it."""
    from ddplab.chapters.buckets import overlap

    timeline = overlap.run(layers=SMALL, mode="naive", iterations=3)
    steps = [max(it["step_end"] - it["start"] for it in its) for its in zip(*timeline.ranks)]
    assert timeline.median("step") == pytest.approx(sorted(steps)[1], rel=1e-12)
    assert timeline.shown == steps.index(sorted(steps)[1])
    assert sum(timeline.phases_ms().values()) == pytest.approx(timeline.step_ms)
    assert set(timeline.phases_ms()) == {"forward", "backward", "waiting", "optimizer"}
    # Naive's blocking all-reduces count as waiting, not as backward's computing.
    assert timeline.median("waiting") > timeline.median("after_last_gradient")

    ddp = step_time.run(world_size=2, batch_size=4, layers=SMALL, iterations=3)
    steps = [max(it["step"] for it in its) for its in zip(*ddp.ranks)]
    assert ddp.step_ms == pytest.approx(1e3 * sorted(steps)[1], rel=1e-12)
    assert sum(ddp.phases_ms().values()) == pytest.approx(ddp.step_ms)
    assert list(ddp.phases_ms()) == list(timeline.phases_ms())  # one bar for both chapters


@pytest.mark.parametrize("cap_mb", [None, 1000, 0.01, 600 / 2 ** 20])
def test_bucket_count_follows_what_ddp_recorded(cap_mb):
    layers = (16, 64, 64, 64, 8)
    recorded = buckets.run(layers=layers, bucket_cap_mb=cap_mb, iterations=2)
    assert bucket_size.bucket_count(layers, cap_mb) == recorded.buckets_per_iteration[1]


def test_scaling_reuses_matching_runs():
    runs = step_time.breakdown(world_sizes=(1, 2), batch_size=4, layers=SMALL, iterations=2)
    result = scaling.run((1, 2), batch_size=4, global_batch_size=8, layers=SMALL, iterations=2,
                         runs=runs)
    assert result.weak[2] is runs[3] and result.alone is runs[0]
    assert result.strong[1].batch_size == 8  # a new pair, at 1 x 8
    assert len(runs) == 4 and result.strong[1] not in runs  # the caller's list is left alone
    assert result.cores >= 1 and result.shared_from == (2 if result.cores == 1 else None)
    # weak scaling keeps each rank's batch: efficiency is one rank's step over the world's
    assert result.efficiency("weak", 2) == pytest.approx(runs[0].step_ms / runs[3].step_ms)


# ---------------------------------------------------------------- the all-reduce


def test_bandwidths_follow_their_definitions():
    result = allreduce.run(world_size=2, sizes=(4096, 65536), repeats=2, copy_bytes=2 ** 20)
    assert result.sizes_bytes == [4096, 65536] and len(result.seconds) == 2
    # 64 KiB in t seconds: 65536 / t bytes per second
    assert result.algbw[1] * result.seconds[1] == pytest.approx(65536)
    # two ranks: each byte crosses the ring once each way, 2(n-1)/n = 1, bus = algorithm
    np.testing.assert_allclose(result.busbw, result.algbw)
    assert result.copy_bandwidth_bytes_per_s * result.copy_seconds == pytest.approx(2 ** 20)
    four = allreduce.run(world_size=4, sizes=(4096,), repeats=1, copy_bytes=2 ** 20)
    assert four.busbw[0] == pytest.approx(1.5 * four.algbw[0])  # 2 x 3 / 4


def test_sizes_parse_as_bytes():
    assert allreduce.check_sizes("4K,64KiB,1M,12") == (4096, 65536, 2 ** 20, 12)
    for bad, match in (("4K,x", "comma-separated"), ("6", "multiple of 4"), ((), "at least")):
        with pytest.raises(ValueError, match=match):
            allreduce.check_sizes(bad)


@pytest.mark.parametrize("call, match", [
    (lambda: accumulation.run(micro_batches=0), "micro_batches must be"),
    (lambda: accumulation.run(mistake="typo"), "mistake must be one of"),
    (lambda: compression.run(hook="int8"), "hook must be one of"),
    (lambda: compression.run(iterations=2), "iterations must be"),
    (lambda: step_time.run(warmup=1), "warmup must be"),
    (lambda: accumulation_time.run(warmup=1), "warmup must be an int >= 2"),
    (lambda: step_time.run(bucket_cap_mb=0), "bucket_cap_mb must be"),
    (lambda: scaling.run((1, 3), global_batch_size=64), "does not split evenly"),
    (lambda: allreduce.run(repeats=0), "repeats must be"),
])
def test_bad_input_is_a_clear_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- the CLI


def test_cli_allreduce_and_step_time_print_the_named_fields():
    data = ddplab_json("allreduce", "--world-size", "2", "--sizes", "4K,64K", "--repeats", "2")
    assert data["world_size"] == 2 and data["sizes_bytes"] == [4096, 65536]
    for key in ("seconds", "algbw", "busbw"):
        assert len(data[key]) == 2
    fit = latency_fit.fit_latency_bandwidth(data["sizes_bytes"], data["seconds"])
    assert (data["alpha_s"], data["bandwidth_bytes_per_s"]) == pytest.approx(fit[:2])
    assert data["fit_supported"] == fit.supported
    data = ddplab_json("step-time", "--world-size", "2", "--batch-size", "4", "--layers",
                       "8,64,32,4", "--iterations", "3")
    assert data["step_ms"] == pytest.approx(sorted(data["step_ms_per_iteration"])[1])
    phases = ("forward", "backward", "waiting", "optimizer")
    assert sum(data[f"{p}_ms"] for p in phases) == pytest.approx(data["step_ms"])
    assert data["world_size"] == 2 and data["batch_size"] == 4


def test_the_hook_comparison_reports_each_run_with_the_hooks_done_so_far():
    calls = []

    def progress(done, total, label, partial=None):
        calls.append((done, total, label, None if partial is None
                      else {hook: result is not None for hook, result in partial.items()}))

    out = compression.compare(hooks=("none", "fp16"), progress=progress)
    assert calls == [(0, 2, "none", None), (1, 2, "fp16", {"none": True, "fp16": False}),
                     (2, 2, "done", None)]
    assert list(out) == ["none", "fp16"]
    # a panel draws the partial result as it draws the whole one: every row, a bar where done
    one = plots.compression({"none": out["none"], "fp16": None})
    assert [t.get_text() for t in one.axes[0].get_yticklabels()] == ["none", "fp16"]
    assert [bar.get_visible() for bar in one.axes[0].patches] == [True, False]
    plt.close(one)


def test_a_move_of_the_powersgd_rank_runs_powersgd_alone_when_the_panel_reuses():
    first = compression.compare(hooks=("none", "powersgd"), powersgd_rank=1, reuse=True)
    partials = []
    second = compression.compare(hooks=("none", "powersgd"), powersgd_rank=2, reuse=True,
                                 progress=lambda *_, partial=None: partials.append(partial))
    assert second["none"] is first["none"]  # the rank changes nothing for it: kept
    assert second["powersgd"] is not first["powersgd"]
    # the kept hook is shown before PowerSGD runs, once
    assert [p for p in partials if p] == [{"none": first["none"], "powersgd": None}]
    # P and Q are (n x r) and (m x r): twice the rank, more bytes on the wire
    assert second["powersgd"].bytes_sent > first["powersgd"].bytes_sent
    fresh = compression.compare(hooks=("none",), powersgd_rank=2)  # the book's: runs anew
    assert fresh["none"] is not second["none"]
    # A world size next door, run ahead by the lab (screen.ahead), keeps these as they were.
    other = compression.compare(hooks=("none",), world_size=3, reuse=True)
    again = compression.compare(hooks=("none", "powersgd"), powersgd_rank=2, reuse=True)
    assert again["none"] is first["none"] and again["powersgd"] is second["powersgd"]
    assert other["none"] is not first["none"] and other["none"].world_size == 3


def test_cli_accumulate_and_compress_print_the_named_fields():
    data = ddplab_json("accumulate", "--world-size", "2", "--batch-size", "4",
                       "--micro-batches", "3", "--seed", "5", "--layers", "8,64,32,4")
    assert data["param_names"][:2] == ["0.weight", "0.bias"]
    np.testing.assert_allclose(data["accumulated_grad"], one_process_grad(SMALL, 2, 4, 3, 5),
                               atol=1e-6)
    np.testing.assert_allclose(data["reference_grad"], data["accumulated_grad"], atol=1e-6)
    assert data["allreduces"] == 1 and data["allreduces_without_no_sync"] == 3
    data = ddplab_json("compress", "--world-size", "2", "--hook", "powersgd", "--seed", "0",
                       "--layers", "8,64,32,4")
    assert data["bytes_sent"] == 1216 and data["bytes_uncompressed"] == SMALL_BYTES
    assert 0 < data["grad_rel_error"] < 2


def test_torchrun_accumulates_the_same_gradient():
    data = ddplab_json("accumulate", "--batch-size", "4", "--micro-batches", "3", "--seed", "5",
                       "--layers", "8,64,32,4", torchrun=2)
    np.testing.assert_allclose(data["accumulated_grad"], one_process_grad(SMALL, 2, 4, 3, 5),
                               atol=1e-6)
