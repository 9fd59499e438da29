"""The memory chapter: each byte count against arithmetic from the parameter count, ZeRO-1's
and FSDP's training against one process on the whole batch, and the CLI (the calculator's
precision schemes and its JavaScript: test_memory_precision.py)."""

import pytest
import torch
import torch.nn.functional as F

import ddplab
import rank_fns
from conftest import ddplab_cli, ddplab_json
from ddplab.chapters.memory import memory
from ddplab.common.mlp import make_batch, make_model

F32 = 4  # bytes per float32
SMALL = 0.3  # million parameters: width 120, 24 layers


def arithmetic(width, optimizer, strategy, world_size, bucket_view=False):
    """What one rank must hold, from the parameter count alone (fp32; Adam adds one float32
    ``step`` per parameter tensor, two tensors per layer)."""
    P, tensors = memory.LAYERS * (width * width + width), 2 * memory.LAYERS
    state = {"sgd": 0, "momentum": P * F32, "adam": 2 * P * F32 + tensors * F32}[optimizer]
    if strategy == "ddp":
        return {"parameters": P * F32, "gradients": P * F32,
                "buckets": 0 if bucket_view else P * F32, "optimizer_state": state}
    if strategy == "zero1":
        return {"parameters": P * F32, "gradients": P * F32,
                "buckets": 0 if bucket_view else P * F32, "optimizer_state": state // world_size}
    steps = tensors * F32 if optimizer == "adam" else 0  # fsdp: every rank keeps every step
    return {"parameters": P * F32 // world_size, "gradients": P * F32 // world_size,
            "buckets": 0, "optimizer_state": (state - steps) // world_size + steps}


@pytest.mark.parametrize("strategy, optimizer, world_size, bucket_view", [
    ("ddp", "adam", 2, False), ("ddp", "adam", 2, True), ("ddp", "sgd", 1, False),
    ("zero1", "adam", 4, False), ("zero1", "momentum", 2, True),
    ("fsdp", "adam", 2, False), ("fsdp", "momentum", 4, False)])
def test_bytes_per_rank_are_the_parameter_arithmetic(strategy, optimizer, world_size,
                                                     bucket_view):
    result = memory.run(world_size=world_size, strategy=strategy, optimizer=optimizer,
                        params_millions=SMALL, bucket_view=bucket_view, steps=1)
    expected = arithmetic(result.width, optimizer, strategy, world_size, bucket_view)
    assert result.parameter_count == memory.LAYERS * (result.width ** 2 + result.width)
    assert result.parameter_count >= SMALL * 1e6
    for rank, held in enumerate(result.bytes_per_rank):
        assert held == expected, f"rank {rank}"
    predicted = result.predicted_per_rank
    assert {k: predicted[k] for k in expected} == expected  # the calculator, exactly
    # saved for backward: each layer's output (23 ReLU results, and the model's, kept by the
    # loss), and the global batch's inputs and targets whole (each rank's rows are views)
    batch, width = memory.BATCH_SIZE, result.width
    activations = (memory.LAYERS * batch + 2 * world_size * batch) * width * F32
    assert result.activation_bytes_per_rank == [activations] * world_size


def one_process(width, optimizer, world_size, steps, seed=0):
    """The same training without any distribution: one process on every global batch."""
    layers = (width,) * (memory.LAYERS + 1)
    model = make_model(layers, seed=seed, init="he")
    kwargs = {"lr": 1e-3, **({"momentum": 0.9} if optimizer == "momentum" else {})}
    cls = torch.optim.Adam if optimizer == "adam" else torch.optim.SGD
    opt = cls(model.parameters(), **kwargs)
    for step in range(steps):
        X, y = make_batch(layers, memory.BATCH_SIZE, world_size, seed, step)
        opt.zero_grad()
        F.mse_loss(model(X), y).backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("strategy, optimizer", [("zero1", "adam"), ("zero1", "momentum"),
                                                 ("fsdp", "adam"), ("fsdp", "momentum")])
def test_zero1_and_fsdp_train_as_ddp(strategy, optimizer):
    """Parameters after 3 steps: the strategy's equal DDP's; with SGD and momentum (a step
    linear in the gradient) both equal one process on every global batch. Adam's step divides
    by the root of its second moment, so on gradients near zero it turns float rounding into
    differences of the order of the learning rate: there, DDP is the reference."""
    params = dict(optimizer=optimizer, params_millions=SMALL, bucket_view=False, steps=3,
                  seed=0, return_parameters=True)
    width = memory.width_for(SMALL)
    start = torch.cat([p.detach().flatten() for p in make_model(
        (width,) * (memory.LAYERS + 1), seed=0, init="he").parameters()])
    ddp, got = (torch.from_numpy(ddplab.run(memory.train, 2, strategy=name, **params)[0]
                                 ["parameters"]) for name in ("ddp", strategy))
    assert (ddp - start).abs().max() > 1e-3  # training moved them far beyond the tolerance
    torch.testing.assert_close(got, ddp, rtol=1e-5, atol=1e-6)
    if optimizer == "momentum":
        reference = one_process(width, optimizer, world_size=2, steps=3)
        torch.testing.assert_close(ddp, reference, rtol=1e-5, atol=1e-6)
    result = memory.run(world_size=2, strategy=strategy, optimizer=optimizer,
                        params_millions=SMALL, steps=3)
    assert result.max_param_diff_vs_ddp < 1e-6


def test_shard_with_fsdp_passes_reshard_after_forward_only_when_set():
    """Left unset, torch's default (2.8 on: None, True for every unit but the root; before:
    True, the root kept whole all the same) reshards each layer after forward; False keeps
    every layer gathered. The listing passes the argument only when set, since torch before
    2.8 raises a ValueError for None (pytorch#155319)."""
    default = ddplab.run(rank_fns.fsdp_gathered_after_forward, 2)
    kept = ddplab.run(rank_fns.fsdp_gathered_after_forward, 2, reshard_after_forward=False)
    assert all(layers == [False, False, False] for layers in default)
    assert all(layers == [True, True, True] for layers in kept)


def test_the_allocator_agrees_with_the_tensor_count_for_8_million_parameters():
    """The rank's own allocator, whichever device the ranks got: malloc on CPU ranks (no peaks:
    glibc keeps none), the CUDA caching allocator on GPU ranks."""
    result = memory.run(world_size=2, strategy="fsdp", optimizer="adam", params_millions=8)
    assert result.parameter_count >= 8_000_000
    for ratio in result.measured_over_counted():
        assert 0.8 < ratio < 1.2
    if result.allocator == "malloc":
        assert result.peak_bytes_per_rank == result.step_peak_bytes_per_rank == [None, None]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("bucket_view", [False, True])
def test_a_gpu_rank_is_measured_by_the_cuda_allocator(bucket_view):
    """DDP at world size 1 on NCCL, Adam, 8 M parameters on cuda:0. The allocator holds the
    tensors the ledger counts except Adam's step counters (on the host unless capturable or
    fused, torch/optim/adam.py), plus the batch and the loss (a few KB here); the first H100 run saw
    1024.25 MiB against the calculator's 1024.25 with the bucket view on one H100. During
    each step after the first, foreach Adam's ``_foreach_sqrt(exp_avg_sq)`` (adam.py line 790)
    holds a temporary of 4 bytes per parameter."""
    with ddplab.placed(backend="nccl"):
        result = memory.run(world_size=1, strategy="ddp", optimizer="adam", params_millions=8,
                            bucket_view=bucket_view, steps=3)
    assert result.allocator == "cuda"
    P, T = result.parameter_count, result.parameter_tensors
    on_gpu = result.total_per_rank[0] - 4 * T
    assert on_gpu <= result.measured_bytes_per_rank[0] < 1.1 * on_gpu
    assert result.peak_bytes_per_rank[0] >= result.measured_bytes_per_rank[0]
    assert 4 * P <= result.step_peak_bytes_per_rank[0] < 4 * P + 0.1 * on_gpu


@pytest.mark.parametrize("bad, message", [
    (dict(strategy="zero3"), "strategy"), (dict(params_millions=0), "params_millions"),
    (dict(world_size=0), "world_size"), (dict(optimizer="lamb"), "optimizer"),
    (dict(bucket_view=1), "bucket_view"), (dict(steps=0), "steps")])
def test_bad_input_is_refused_before_any_rank_starts(bad, message):
    with pytest.raises(ValueError, match=message):
        memory.run(**bad)


def test_cli_json_fields():
    data = ddplab_json("memory", "--world-size", "2", "--strategy", "zero1", "--optimizer",
                       "momentum", "--params-millions", str(SMALL), "--bucket-view")
    width = memory.width_for(SMALL)
    assert data["parameter_count"] == memory.LAYERS * (width * width + width)
    expected = arithmetic(width, "momentum", "zero1", 2, bucket_view=True)
    assert data["bytes_per_rank"] == [expected, expected]
    assert len(data["measured_bytes_per_rank"]) == 2
    assert all(isinstance(b, int) for b in data["measured_bytes_per_rank"])
    assert data["allocator"] in ("malloc", "cuda")
    assert data["max_param_diff_vs_ddp"] < 1e-6


@pytest.mark.parametrize("args, message", [
    (("--world-size", "0"), "world_size must be a positive int, got 0"),
    (("--strategy", "zero2"), "strategy must be one of 'ddp', 'zero1', 'fsdp'; got 'zero2'"),
    (("--params-millions", "0"), "params_millions must be a positive number, got 0.0"),
])
def test_cli_bad_input_exits_2_with_one_line(args, message):
    done = ddplab_cli("memory", *args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines == [f"python -m ddplab memory: error: {message}"]


def test_torchrun_gives_the_local_pools_bytes():
    args = ("--strategy", "fsdp", "--optimizer", "adam", "--params-millions", str(SMALL))
    local = ddplab_json("memory", "--world-size", "2", *args)
    launched = ddplab_json("memory", *args, torchrun=2)
    for field in ("parameter_count", "bytes_per_rank"):
        assert launched[field] == local[field], field
    assert launched["max_param_diff_vs_ddp"] < 1e-6
