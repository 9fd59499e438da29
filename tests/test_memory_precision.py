"""The memory calculator's precision schemes: the bytes per parameter worked out by
hand for each scheme, the room ``largest_model`` leaves for the optimizer step (and the
foreach Adam temporary it leaves room for, seen in a run), autocast and FSDP2's
MixedPrecisionPolicy counted in real runs against the calculator, and the calculator's
JavaScript against its Python."""

import json
import shutil
import subprocess

import pytest
import torch

from conftest import ddplab_json
from ddplab.chapters.memory import calculator, calculator_form, precision, schemes

GB80 = 80e9


def test_autocast_keeps_fp32_bytes_the_issues_arithmetic():
    # 4 parameters + 4 gradients + 4 buckets (0 with the bucket view) + 8 Adam state
    per = calculator.bytes_per_parameter
    assert per("adam", "ddp", 8) == 4 + 4 + 4 + 8 == 20  # autocast is the default scheme
    assert per("adam", "ddp", 8, "autocast", bucket_view=True) == 16
    assert per("adam", "ddp", 8, "fp32") == 20  # autocast keeps what fp32 keeps
    # ZeRO-1: 12 + 8/N, 8 + 8/N with the view
    for n in (1, 2, 8, 64):
        assert per("adam", "zero1", n, "autocast") == pytest.approx(12 + 8 / n)
        assert per("adam", "zero1", n, "autocast", True) == pytest.approx(8 + 8 / n)
    # at 8 ranks by default: 13 bytes against the master-copy scheme's 5.5 (2 + 2 + 12 / 8)
    assert per("adam", "zero1", 8, "autocast") == 13
    assert per("adam", "zero1", 8, "bf16_master", True) == 5.5
    assert 80e9 / 13 == pytest.approx(6.15e9, rel=1e-3)  # the steady state alone


def test_the_master_copy_and_fsdp_policy_schemes():
    per = calculator.bytes_per_parameter
    assert per("adam", "ddp", 8, "bf16_master", bucket_view=True) == 2 + 2 + 4 + 8
    assert per("adam", "ddp", 8, "bf16_master") == 2 + 2 + 2 + 4 + 8
    assert per("adam", "zero2", 8, "bf16_master") == pytest.approx(2 + (2 + 12) / 8)
    # MixedPrecisionPolicy keeps fp32 shards: FSDP's fp32 bytes, 16 / N
    assert per("adam", "fsdp", 8, "fsdp_policy") == per("adam", "fsdp", 8, "fp32") == 2
    with pytest.raises(ValueError, match="fsdp_policy is for strategy fsdp only, not ddp"):
        calculator.bytes_per_rank(1, "adam", "ddp", 8, "fsdp_policy")


def test_largest_model_leaves_room_for_the_optimizer_step():
    # a model that exactly fills 80 GB between steps (the page once said 5 billion parameters,
    # bf16 + master copy, DDP with the bucket view) does not fit its first Adam step
    steady = calculator.bytes_per_rank(5e9, "adam", "ddp", 8, "bf16_master", True)
    assert sum(steady.values()) == GB80
    most = calculator.largest_model(GB80, "adam", "ddp", 8, "bf16_master", True)
    assert most == GB80 / (16 + 4 + 4) < 5e9  # foreach Adam's copy + fp32 grads for the master
    # autocast DDP by default: 20 bytes + 4 of the step; ZeRO-1 shards the step's copy too
    assert calculator.largest_model(GB80, "adam", "ddp", 8) == pytest.approx(GB80 / 24)
    assert calculator.largest_model(GB80, "adam", "zero1", 8) == pytest.approx(GB80 / 13.5)
    assert calculator.largest_model(GB80, "sgd", "ddp", 8) == GB80 / 12  # SGD steps in place
    # activations count while they live (backward), the step's temporaries after them
    assert calculator.largest_model(GB80, "adam", "ddp", 8, activation_bytes=40e9) == \
        pytest.approx(40e9 / 20)


def test_the_pages_table_by_scheme_holds_the_hand_worked_bytes():
    """Adam under autocast: DDP keeps 4 bytes of parameters, 4 of gradients, 4 of buckets and 8
    of state per parameter on every rank (20; 16 with the bucket view); FSDP's policy shards
    all 16 of its fp32 bytes, 16 / 64 = 0.25 at 64 ranks. The largest DDP model in 80 GB leaves
    4 more bytes for the step's copy of exp_avg_sq: 80e9 / 24 = 3.33 B."""
    lines = schemes.table("adam", (1, 8, 64), 80e9, 8).splitlines()
    assert len(lines) == 2 + len(schemes.ROWS)
    rows = {line[:42].strip(): line[42:].split() for line in lines[2:]}
    assert rows["DDP, autocast"] == ["20.00", "20.00", "20.00", "3.33", "B"]
    assert rows["DDP, bucket view, autocast"][:3] == ["16.00"] * 3
    assert rows["FSDP, MixedPrecisionPolicy"][:3] == ["16.00", "2.00", "0.25"]
    assert schemes.table("sgd", (2,), 8e9, 2) != schemes.table("adam", (2,), 8e9, 2)


def test_foreach_adam_allocates_a_copy_of_exp_avg_sq_in_its_step():
    # what the step's headroom is for: _multi_tensor_adam's torch._foreach_sqrt(exp_avg_sqs),
    # the default on GPUs; forced here on CPU tensors
    params = [torch.nn.Parameter(torch.randn(100, 10)), torch.nn.Parameter(torch.randn(7))]
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer = torch.optim.Adam(params, foreach=True)
    allocated, sqrt = [], torch._foreach_sqrt

    def spy(tensors):
        out = sqrt(tensors)
        allocated.append(sum(t.numel() * t.element_size() for t in out))
        return out

    torch._foreach_sqrt = spy
    try:
        optimizer.step()
    finally:
        torch._foreach_sqrt = sqrt
    assert allocated == [4 * 1007] == [calculator.STEP_TEMPORARY_BYTES["adam"] * 1007]


@pytest.mark.parametrize("strategy, scheme, bucket_view", [
    ("ddp", "autocast", False), ("ddp", "autocast", True), ("zero1", "autocast", False),
    ("fsdp", "fsdp_policy", False)])
def test_counted_bytes_under_mixed_precision_equal_the_calculator(strategy, scheme,
                                                                 bucket_view):
    result = precision.run(world_size=2, strategy=strategy, scheme=scheme,
                           bucket_view=bucket_view)  # 2 M: malloc sees the tensors, not overheads
    P = result.parameter_count
    held = result.bytes_per_rank[0]
    # by hand, fp32 everywhere: Adam's 8 bytes + 4 per tensor for its step counter
    state = 8 * P + 4 * result.parameter_tensors
    expected = {
        ("ddp", False): {"parameters": 4 * P, "gradients": 4 * P, "buckets": 4 * P,
                         "optimizer_state": state},
        ("ddp", True): {"parameters": 4 * P, "gradients": 4 * P, "buckets": 0,
                        "optimizer_state": state},
        ("zero1", False): {"parameters": 4 * P, "gradients": 4 * P, "buckets": 4 * P,
                           "optimizer_state": state // 2},
        ("fsdp", False): {"parameters": 2 * P, "gradients": 2 * P, "buckets": 0,
                          "optimizer_state": 4 * P + 4 * result.parameter_tensors},
    }[strategy, bucket_view]
    assert all(h == expected for h in result.bytes_per_rank), result.describe()
    assert result.matches_calculator()
    assert held == {k: result.predicted_per_rank[k] for k in held}
    assert result.dtypes["parameters"] == result.dtypes["gradients"] == ["float32"]
    assert result.dtypes["optimizer_state"] == ["float32"]
    assert result.output_dtype == "bfloat16"  # it did compute in bf16
    assert all(m is None or 0.8 < m < 1.2 for m in result.measured_over_counted())


def test_fsdp_policy_computes_with_bf16_layers_and_keeps_fp32_shards():
    policy = precision.run(world_size=2, strategy="fsdp", scheme="fsdp_policy",
                           params_millions=0.3)
    plain = precision.run(world_size=2, strategy="fsdp", scheme="autocast",
                          params_millions=0.3)
    assert policy.first_layer_computes_with["dtypes"] == ["bfloat16"]
    assert plain.first_layer_computes_with["dtypes"] == ["float32"]
    assert policy.first_layer_computes_with["bytes"] * 2 == \
        plain.first_layer_computes_with["bytes"]
    assert policy.bytes_per_rank == plain.bytes_per_rank  # the same steady state


@pytest.mark.parametrize("bad, message", [
    (dict(scheme="fsdp_policy", strategy="ddp"), "strategy 'fsdp' only"),
    (dict(scheme="bf16"), "scheme"), (dict(strategy="zero2"), "strategy"),
    (dict(params_millions=0), "params_millions"), (dict(steps=0), "steps")])
def test_bad_input_is_refused_before_any_rank_starts(bad, message):
    with pytest.raises(ValueError, match=message):
        precision.run(**bad)


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the JavaScript")
def test_the_generated_javascript_computes_what_python_does():
    cases = [(p, o, s, w, pr, bv) for p in (1e6, 7e9) for o in ("sgd", "momentum", "adam")
             for s in calculator.CALCULATOR_STRATEGIES for w in (1, 8)
             for pr in calculator.PRECISIONS for bv in (False, True)
             if calculator.ONLY_WITH[pr] in ("", s)]
    calls = ",".join(f"[bytes_per_rank({p}, '{o}', '{s}', {w}, '{pr}', {str(bv).lower()}, 48,"
                     f" 1e9), largest_model(80e9, '{o}', '{s}', {w}, '{pr}', "
                     f"{str(bv).lower()}, 1e9)]" for p, o, s, w, pr, bv in cases)
    refused = ("(function () { try { bytes_per_rank(1, 'adam', 'ddp', 8, 'fsdp_policy'); }"
               " catch (e) { return e.message; } })()")
    script = calculator_form.javascript() + \
        f"\nconsole.log(JSON.stringify([[{calls}], {refused}]));"
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True)
    results, message = json.loads(out.stdout)
    for (p, o, s, w, pr, bv), (parts, most) in zip(cases, results):
        assert parts == pytest.approx(calculator.bytes_per_rank(p, o, s, w, pr, bv, 48, 1e9))
        assert most == pytest.approx(calculator.largest_model(80e9, o, s, w, pr, bv, 1e9))
    with pytest.raises(ValueError) as python:
        calculator.bytes_per_rank(1, "adam", "ddp", 8, "fsdp_policy")
    assert message == str(python.value)


def test_the_form_offers_every_scheme_with_autocast_chosen():
    form = calculator_form.form_html()
    assert '<option value="autocast" selected>' in form
    for scheme in calculator.PRECISIONS:
        assert f'value="{scheme}"' in form
    assert "steady state" in form and "during optimizer.step()" in form


def test_the_translation_refuses_python_it_does_not_know():
    with pytest.raises(ValueError, match="no translation"):
        calculator_form._function("def f(x):\n    return max(x, 1)\n")
    with pytest.raises(ValueError, match="no translation"):
        calculator_form._function("def f(x):\n    if x:\n        raise KeyError(x)\n")


def test_cli_json_carries_the_scheme_and_the_calculators_bytes():
    data = ddplab_json("precision", "--world-size", "2", "--strategy", "zero1",
                       "--params-millions", "0.3")
    assert data["scheme"] == "autocast" and data["strategy"] == "zero1"
    held = data["bytes_per_rank"][0]
    assert {k: data["predicted_per_rank"][k] for k in held} == held
    assert data["dtypes"]["parameters"] == ["float32"]


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the JavaScript")
@pytest.mark.parametrize("precision, strategy, shown", [
    ("autocast", "ddp", "largest model that fits, step included: 3.33 billion"),  # 80 / 24
    ("fsdp_policy", "ddp", "precision fsdp_policy is for strategy fsdp only, not ddp")])
def test_the_forms_script_shows_the_steady_state_the_step_and_refusals(precision, strategy,
                                                                         shown):
    html = calculator_form.form_html()
    script = html.split("<script>\n", 1)[1].rsplit("\n</script>", 1)[0]
    values = {"billions": "7", "optimizer": "adam", "precision": precision,
              "strategy": strategy, "world_size": "8", "activations": "0", "gpu": "80"}
    page = (f"var elements = {{bucket_view: {{checked: false}}}}, values = {json.dumps(values)};"
            "for (var k in values) elements[k] = {value: values[k]};"
            "var pre = {textContent: ''}, form = {elements: elements, "
            "addEventListener: function () {}};"
            "var document = {getElementById: function () { return {querySelector: "
            "function (q) { return q === 'form' ? form : pre; }, "
            "querySelectorAll: function () { return []; }}; }};")
    out = subprocess.run(["node", "-e", page + script + "\nconsole.log(pre.textContent);"],
                         capture_output=True, text=True, check=True)
    assert shown in out.stdout
    if precision == "autocast":  # 7 B x 20 bytes, and 7 B x (20 - 0 + 4) in the step
        assert "total per rank  140.00 GB: does not fit" in out.stdout
        assert "during optimizer.step(), at least 168.00 GB" in out.stdout


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the JavaScript")
def test_the_preset_answers_the_3b_case_for_every_strategy_as_python_does():
    """One click ("3 B parameters, Adam, 4 GPUs of 80 GB") sets the form, and its lines name
    every strategy with the bytes per rank the Python calculator gives."""
    label, values = calculator_form.PRESETS[0]
    html = calculator_form.form_html()
    assert label in html
    script = html.split("<script>\n", 1)[1].rsplit("\n</script>", 1)[0]
    page = ("var elements = {bucket_view: {checked: true}}, clicks = [];"
            "['billions', 'optimizer', 'precision', 'strategy', 'world_size', 'activations', "
            "'gpu'].forEach(function (k) { elements[k] = {value: '1'}; });"
            "var pre = {textContent: ''}, form = {elements: elements, "
            "addEventListener: function () {}};"
            f"var button = {{getAttribute: function () {{ return {json.dumps(json.dumps(values))};"
            " }, addEventListener: function (e, f) { clicks.push(f); }};"
            "var document = {getElementById: function () { return {querySelector: "
            "function (q) { return q === 'form' ? form : pre; }, "
            "querySelectorAll: function () { return [button]; }}; }};")
    out = subprocess.run(["node", "-e", page + script + "\nclicks[0]();"
                          "console.log(pre.textContent);"], capture_output=True, text=True,
                         check=True).stdout
    for strategy in calculator.CALCULATOR_STRATEGIES:
        held = sum(calculator.bytes_per_rank(3e9, "adam", strategy, 4).values())
        step = held + 3e9 * calculator.step_temporary_per_parameter("adam", strategy, 4)
        verdict = "fits" if max(held, step) <= 80e9 else "does not fit"
        assert f"  {strategy:<6}{held / 1e9:.1f} GB, {step / 1e9:.1f} GB: {verdict}" in out


def test_the_3b_case_each_way_is_the_byte_count_by_hand():
    """3 B parameters, Adam, 4 ranks, autocast: DDP 4 + 4 + 4 + 8 bytes, ZeRO-1 with the bucket
    view 4 + 4 + 8 / 4, FSDP (4 + 4 + 8) / 4; the step adds foreach Adam's 4 bytes per
    parameter it steps (a quarter of them where the state is sharded)."""
    case = calculator.compare(3e9, "adam", world_size=4, memory_bytes=80e9)
    assert case.held == pytest.approx({"DDP": 60e9, "ZeRO-1, bucket view": 30e9, "FSDP": 12e9})
    assert case.in_the_step == pytest.approx({"DDP": 72e9, "ZeRO-1, bucket view": 33e9,
                                              "FSDP": 15e9})
    assert all(case.fits.values())
    assert not calculator.compare(4e9, "adam", 4, 80e9).fits["DDP"]  # 96 GB in the step
