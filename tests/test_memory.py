"""The memory chapter: each byte count against arithmetic from the parameter count, ZeRO-1's
and FSDP's training against one process on the whole batch, the calculator's JavaScript
against its Python, and the CLI."""

import json
import shutil
import subprocess

import pytest
import torch
import torch.nn.functional as F

import ddplab
from conftest import ddplab_cli, ddplab_json
from ddplab.chapters.memory import calculator, calculator_form, memory
from ddplab.common.mlp import make_batch, make_model
from ddplab.engine.cluster import defaults

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


def test_malloc_agrees_with_the_tensor_count_for_8_million_parameters():
    # Host malloc counts a CPU rank's tensors; on a GPU rank it counts the CUDA runtime instead
    # (821 MB against 173 MB on an H100), so this claim is about CPU ranks, on any machine.
    with defaults(device="cpu"):
        result = memory.run(world_size=2, strategy="fsdp", optimizer="adam", params_millions=8)
    assert result.device == "cpu"
    assert result.parameter_count >= 8_000_000
    for ratio in result.measured_over_counted():
        assert 0.8 < ratio < 1.2


@pytest.mark.parametrize("bad, message", [
    (dict(strategy="zero3"), "strategy"), (dict(params_millions=0), "params_millions"),
    (dict(world_size=0), "world_size"), (dict(optimizer="lamb"), "optimizer"),
    (dict(bucket_view=1), "bucket_view"), (dict(steps=0), "steps")])
def test_bad_input_is_refused_before_any_rank_starts(bad, message):
    with pytest.raises(ValueError, match=message):
        memory.run(**bad)


def test_rules_of_thumb():
    assert calculator.bytes_per_parameter("adam", "ddp", 8, "bf16", bucket_view=True) == 16
    assert calculator.bytes_per_parameter("adam", "fsdp", 8, "bf16") == 2
    assert calculator.bytes_per_parameter("adam", "zero1", 4, "bf16", True) == 2 + 2 + 3
    assert calculator.largest_model(80e9, "adam", "ddp", 1, "bf16", True) == 5e9


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the JavaScript")
def test_the_generated_javascript_computes_what_python_does():
    cases = [(p, o, s, w, pr, bv) for p in (1e6, 7e9) for o in ("sgd", "momentum", "adam")
             for s in calculator.CALCULATOR_STRATEGIES for w in (1, 8) for pr in ("fp32", "bf16")
             for bv in (False, True)]
    calls = ",".join(f"[bytes_per_rank({p}, '{o}', '{s}', {w}, '{pr}', {str(bv).lower()}, 48,"
                     f" 1e9), largest_model(80e9, '{o}', '{s}', {w}, '{pr}', "
                     f"{str(bv).lower()}, 1e9)]" for p, o, s, w, pr, bv in cases)
    script = calculator_form.javascript() + f"\nconsole.log(JSON.stringify([{calls}]));"
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True)
    for (p, o, s, w, pr, bv), (parts, most) in zip(cases, json.loads(out.stdout)):
        assert parts == pytest.approx(calculator.bytes_per_rank(p, o, s, w, pr, bv, 48, 1e9))
        assert most == pytest.approx(calculator.largest_model(80e9, o, s, w, pr, bv, 1e9))


def test_the_translation_refuses_python_it_does_not_know():
    with pytest.raises(ValueError, match="no translation"):
        calculator_form._function("def f(x):\n    return max(x, 1)\n")


def test_cli_json_fields():
    data = ddplab_json("memory", "--world-size", "2", "--strategy", "zero1", "--optimizer",
                       "momentum", "--params-millions", str(SMALL), "--bucket-view")
    width = memory.width_for(SMALL)
    assert data["parameter_count"] == memory.LAYERS * (width * width + width)
    expected = arithmetic(width, "momentum", "zero1", 2, bucket_view=True)
    assert data["bytes_per_rank"] == [expected, expected]
    assert len(data["measured_bytes_per_rank"]) == 2
    assert all(isinstance(b, int) for b in data["measured_bytes_per_rank"])
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
