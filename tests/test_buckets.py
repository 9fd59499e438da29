"""The bucket recording against layouts worked out by hand, and gradients against one process.

The small MLP 8 -> 64 -> 32 -> 4 has parameters of known sizes (float32):

    0.weight 2048 B   0.bias 256 B   2.weight 8192 B   2.bias 128 B   4.weight 512 B   4.bias 16 B

With a cap you pass, every bucket has that limit, and a bucket closes once its bytes reach it.
In gradient-ready order (4.bias, 4.weight, 2.bias, 2.weight, 0.bias, 0.weight; the running
sums are 16, 528, 656, 8848, 9104, 11152 bytes) that gives the layouts in LAYOUTS.
"""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import ddplab_cli, ddplab_json
from ddplab.chapters.buckets import bucket_views, buckets, overlap
from ddplab.common import mlp

SMALL = (8, 64, 32, 4)
REGISTRATION = ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
READY = ["4.bias", "4.weight", "2.bias", "2.weight", "0.bias", "0.weight"]
LAYOUTS = {  # bytes cap -> buckets after the rebuild, in launch order
    2 ** 20: [READY],  # 11152 bytes < 1 MiB: one bucket
    8000: [READY[:4], READY[4:]],  # closes at 2.weight (8848 >= 8000); the rest is 2304
    600: [READY[:3], ["2.weight"], READY[4:]],  # 656 >= 600; 8192 >= 600; 2304 >= 600
}


def one_process_grad(layers, seed, world_size, batch_size, iteration, rows=None):
    """Mean-loss gradient of one plain model on the global batch (or some of its rows)."""
    model = mlp.make_model(layers, seed)
    X, y = mlp.make_batch(layers, batch_size, world_size, seed, iteration)
    if rows is not None:
        X, y = X[rows], y[rows]
    F.mse_loss(model(X), y).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()]).numpy()


def test_the_small_models_sizes_and_gradient_order_are_what_the_layouts_assume():
    model = mlp.make_model(SMALL, 0)
    sizes = {n: 4 * p.numel() for n, p in model.named_parameters()}
    assert list(sizes) == REGISTRATION
    assert [sizes[n] for n in READY] == [16, 512, 128, 8192, 256, 2048]
    order = []  # measured here, in one process, without DDP
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda _, name=name: order.append(name))
    F.mse_loss(model(torch.randn(5, 8)), torch.randn(5, 4)).backward()
    assert order == READY


@pytest.mark.parametrize("cap_bytes", sorted(LAYOUTS))
def test_recorded_buckets_match_the_hand_layout_and_gradients_are_ddps(cap_bytes):
    world_size, batch_size, seed = 2, 6, 3
    result = buckets.run(layers=SMALL, bucket_cap_mb=cap_bytes / 2 ** 20, iterations=3,
                         world_size=world_size, batch_size=batch_size, seed=seed)
    assert result.params(0) == [REGISTRATION]  # iteration 0: one bucket, registration order
    assert result.params(1) == result.params(2) == LAYOUTS[cap_bytes]
    assert result.buckets_per_iteration == [1, len(LAYOUTS[cap_bytes]), len(LAYOUTS[cap_bytes])]
    sizes = dict(zip(REGISTRATION, [2048, 256, 8192, 128, 512, 16]))
    for layout in result.layouts:
        assert [b["index"] for b in layout] == list(range(len(layout)))
        for b in layout:
            assert b["bytes"] == sum(sizes[p] for p in b["params"]) == 4 * b["numel"]
    assert result.ready_order == READY
    # The hook divides and all-reduces like DDP: the same gradients as DDP without a hook,
    # as the naive per-parameter all-reduce, and as one process on the whole batch.
    assert result.max_diff_hook < 1e-7 and result.max_diff_naive < 1e-6
    reference = one_process_grad(SMALL, seed, world_size, batch_size, iteration=2)
    np.testing.assert_allclose(result.grads, [reference] * world_size, atol=1e-6)
    local = one_process_grad(SMALL, seed, world_size, batch_size, 2, rows=slice(0, batch_size))
    assert np.abs(local - reference).max() > 1e-3  # so the comparison above can fail
    assert result.naive_calls_per_iteration == [6, 6, 6]


def test_static_graph_rebuilds_one_iteration_later():
    result = buckets.run(layers=SMALL, bucket_cap_mb=600 / 2 ** 20, iterations=4,
                         static_graph=True)
    assert [result.params(i) for i in range(4)] == [[REGISTRATION]] * 2 + [LAYOUTS[600]] * 2


def test_find_unused_parameters_packs_registration_order_reversed_and_never_rebuilds():
    # Registration order with a 600-byte cap: [0.weight] (2048), [0.bias, 2.weight] (8448),
    # [2.bias, 4.weight] (640), [4.bias]; DDP reverses the list of buckets.
    expected = [["4.bias"], ["2.bias", "4.weight"], ["0.bias", "2.weight"], ["0.weight"]]
    result = buckets.run(layers=SMALL, bucket_cap_mb=600 / 2 ** 20, iterations=3,
                         find_unused_parameters=True)
    assert [result.params(i) for i in range(3)] == [expected] * 3


def test_the_small_first_bucket_only_with_the_default_cap_and_stale_logging():
    # 64,1024,1024,10: 2.weight alone is 4 MiB. In ready order the default's 1 MiB first
    # limit closes a bucket at 2.weight; an explicit 25 MiB cap holds everything (4.3 MiB).
    default = buckets.run(iterations=3)
    explicit = buckets.run(bucket_cap_mb=25, iterations=2)
    assert default.params(1) == [["4.bias", "4.weight", "2.bias", "2.weight"],
                                 ["0.bias", "0.weight"]]
    assert explicit.params(1) == [["4.bias", "4.weight", "2.bias", "2.weight", "0.bias",
                                   "0.weight"]]
    total = 4 * sum(default.param_numels)
    assert total == 4 * (64 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10)
    assert default.logged_sizes == [total]  # construction time, never updated
    # Logged at the start of forward, before that forward's rebuild: from iteration 2 on.
    assert default.logged_rebuilt_sizes == [b["bytes"] for b in default.layouts[1]]
    assert explicit.logged_rebuilt_sizes is None


def test_gradient_as_bucket_view_keeps_one_copy_of_the_gradients():
    result = bucket_views.views(layers=SMALL, iterations=3)
    rows = {(r["gradient_as_bucket_view"], r["set_to_none"]): r for r in result.rows}
    assert result.param_bytes == 11152 and result.param_count == 6
    for (as_view, set_to_none), r in rows.items():
        assert r["bucket_bytes"] == 11152
        assert r["separate_grad_bytes"] == (0 if as_view else 11152)
        assert r["views"] == (6 if as_view else 0)
        assert r["accumulated_in_place"] == (6 if as_view and not set_to_none else 0)
    reference = rows[(False, False)]["grads"]
    for r in result.rows:
        np.testing.assert_allclose(r["grads"], reference, atol=1e-7)


def test_timelines_keep_the_order_of_events():
    naive = overlap.run(layers=SMALL, mode="naive", iterations=2)
    assert [len(it["comm"]) for r in naive.ranks for it in r] == [6] * 4
    for r in naive.ranks:
        for it in r:
            ready = [t for _, t in it["ready"]]
            for call, next_ready in zip(it["comm"], ready[1:]):
                assert call["end"] <= next_ready  # a blocking call: backward waits for it
    huge = overlap.run(layers=SMALL, bucket_cap_mb=1000, iterations=2)
    assert [len(it["comm"]) for r in huge.ranks for it in r] == [1] * 4
    assert huge.started_during_backward == [0] * 4
    tiny = overlap.run(layers=SMALL, bucket_cap_mb=600 / 2 ** 20, iterations=2)
    assert [c["params"] for c in tiny.all_reduces] == LAYOUTS[600]
    assert tiny.started_during_backward == [2] * 4  # all but the last bucket
    local = overlap.run(layers=SMALL, mode="local", iterations=2)
    # Nothing to wait for: the time after the last gradient is a small part of backward.
    assert local.all_reduces == [] and local.median("waiting") < local.median("backward")
    assert sum(local.phases_ms().values()) == pytest.approx(1e3 * local.median("step"))


@pytest.mark.parametrize("call, match", [
    (lambda: buckets.run(layers=(64,)), "at least 2 widths"),
    (lambda: buckets.run(layers="64,0,10"), "every width in layers"),
    (lambda: buckets.run(layers="64,x"), "comma-separated ints"),
    (lambda: buckets.run(bucket_cap_mb=0), "bucket_cap_mb must be"),
    (lambda: buckets.run(bucket_cap_mb=-1.5), "bucket_cap_mb must be"),
    (lambda: buckets.run(bucket_cap_mb=float("nan")), "bucket_cap_mb must be"),
    (lambda: buckets.run(iterations=0), "iterations must be a positive int"),
    (lambda: buckets.run(world_size=0), "world_size must be"),
    (lambda: overlap.run(mode="fast"), "mode must be one of"),
    (lambda: overlap.run(warmup=1), "warmup must be"),
    (lambda: overlap.run(depth=0), "depth must be a positive int"),
    (lambda: bucket_views.views(iterations=0), "iterations must be"),
])
def test_bad_input_is_a_clear_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_cli_json_lists_each_iterations_buckets_in_launch_order():
    done = ddplab_cli("buckets", "--layers", "8,64,32,4", "--bucket-cap-mb", str(600 / 2 ** 20),
               "--iterations", "2", "--world-size", "2", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["layers"] == list(SMALL) and data["world_size"] == 2
    assert data["bucket_bytes_cap"] == data["first_bucket_bytes_cap"] == 600
    assert [[b["params"] for b in it["buckets"]] for it in data["iterations"]] == \
        [[REGISTRATION], LAYOUTS[600]]
    for it in data["iterations"]:
        assert [b["index"] for b in it["buckets"]] == list(range(len(it["buckets"])))
        assert sum(b["bytes"] for b in it["buckets"]) == 11152
        assert all(b["bytes"] == 4 * b["numel"] for b in it["buckets"])
    bad = ddplab_cli("buckets", "--layers", "64", "--json")
    assert bad.returncode == 2 and "at least 2 widths" in bad.stderr
    bad = ddplab_cli("buckets", "--bucket-cap-mb", "0")
    assert bad.returncode == 2 and "bucket_cap_mb must be" in bad.stderr


def test_torchrun_records_the_same_buckets():
    data = ddplab_json("buckets", "--layers", "8,64,32,4", "--bucket-cap-mb",
                       str(8000 / 2 ** 20), "--iterations", "2", torchrun=2)
    assert data["world_size"] == 2
    assert [[b["params"] for b in it["buckets"]] for it in data["iterations"]] == \
        [[REGISTRATION], LAYOUTS[8000]]


def test_overlap_cli_reports_every_ranks_all_reduces_of_the_shown_step():
    data = ddplab_json("overlap", "--layers", "8,64,32,4", "--bucket-cap-mb",
                       str(600 / 2 ** 20), "--iterations", "2", "--world-size", "2")
    assert data["mode"] == "ddp" and len(data["step_ms_per_iteration"]) == 2
    # the run's step is the upper middle of its two (timed_step.middle), its phases add up to it
    assert data["step_ms"] == max(data["step_ms_per_iteration"])
    assert sum(data[f"{p}_ms"] for p in ("forward", "backward", "waiting", "optimizer")) == \
        pytest.approx(data["step_ms"])
    assert len(data["shown_iteration"]) == 2
    for rank in data["shown_iteration"]:
        assert [c["params"] for c in rank["comm"]] == LAYOUTS[600]
        assert sorted(name for name, _ in rank["ready"]) == sorted(REGISTRATION)
        assert all(c["start"] <= c["end"] for c in rank["comm"])
