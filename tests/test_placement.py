"""Where ranks run (engine/backend.py): one backend and device per pool, chosen once, refused
before any rank starts where the machine cannot serve it, recorded in every result; CPU ranks
blind to the GPUs. The rules are checked for GPU counts given by hand, so they hold on any
machine; what needs a real GPU is marked ``gpu``."""

import contextlib
import io
import os

import pytest
import torch

import ddplab
import rank_fns
from conftest import ddplab_json, descendants
from ddplab.__main__ import main
from ddplab.chapters.memory import memory, precision
from ddplab.chapters.memory import step_time as memory_step_time
from ddplab.chapters.running import first_group as check
from ddplab.common.results import Result, placement_text
from ddplab.engine import backend
from ddplab.engine.backend import Placement, Ranks, needs_fresh_processes
from ddplab.engine.cluster import defaults

GLOO_CPU, GLOO_CUDA = Placement("gloo", "cpu"), Placement("gloo", "cuda")
NCCL_CUDA = Placement("nccl", "cuda")
GPUS = torch.cuda.device_count()


@pytest.fixture
def no_overrides(monkeypatch):
    monkeypatch.delenv(backend.BACKEND_ENV, raising=False)
    monkeypatch.delenv(backend.DEVICE_ENV, raising=False)
    return monkeypatch


@pytest.mark.parametrize("gpus, expected", [(0, GLOO_CPU), (1, GLOO_CPU), (2, NCCL_CUDA),
                                            (8, NCCL_CUDA)])
def test_auto_is_nccl_on_cuda_only_with_two_gpus_or_more(no_overrides, gpus, expected):
    # One GPU could serve NCCL at world size 1 only (NVIDIA/nccl#418): a sweep would switch.
    assert backend.default_placement(gpus=gpus) == expected


def test_under_torchrun_auto_is_nccl_with_a_gpu_per_process(no_overrides):
    assert backend.default_placement(gpus=1, ranks_per_host=1) == NCCL_CUDA
    assert backend.default_placement(gpus=1, ranks_per_host=2) == GLOO_CPU
    assert backend.default_placement(gpus=0, ranks_per_host=1) == GLOO_CPU


@pytest.mark.parametrize("env, gpus, expected", [
    ({"DDPLAB_DEVICE": "cuda"}, 1, GLOO_CUDA),  # several ranks' CUDA code on one GPU
    ({"DDPLAB_DEVICE": "cuda"}, 2, NCCL_CUDA),
    ({"DDPLAB_DEVICE": "cpu"}, 8, GLOO_CPU),
    ({"DDPLAB_BACKEND": "gloo"}, 8, GLOO_CPU),
    ({"DDPLAB_BACKEND": "nccl"}, 1, NCCL_CUDA),  # asked for; check() refuses W=2 later
    ({"DDPLAB_BACKEND": "gloo", "DDPLAB_DEVICE": "cuda"}, 8, GLOO_CUDA)])
def test_the_environment_decides_what_auto_means(no_overrides, env, gpus, expected):
    for name, value in env.items():
        no_overrides.setenv(name, value)
    assert backend.default_placement(gpus=gpus) == expected


def test_a_bad_environment_value_names_the_variable(no_overrides):
    no_overrides.setenv("DDPLAB_BACKEND", "mpi")
    with pytest.raises(ValueError, match="DDPLAB_BACKEND"):
        backend.default_placement(gpus=0)


@pytest.mark.parametrize("asked, default, expected", [
    (("auto", "auto"), NCCL_CUDA, NCCL_CUDA),
    (("gloo", "auto"), NCCL_CUDA, GLOO_CUDA),  # the pool's device, another backend
    (("auto", "cpu"), NCCL_CUDA, GLOO_CPU),  # NCCL cannot serve CPU tensors
    (("nccl", "auto"), GLOO_CPU, NCCL_CUDA),  # NCCL implies CUDA
    (("auto", "cuda"), GLOO_CPU, GLOO_CUDA)])
def test_a_call_takes_the_pool_s_placement_for_what_it_leaves_at_auto(asked, default, expected):
    assert backend.resolve(*asked, default) == expected


@pytest.mark.parametrize("placement, ranks, gpus, match", [
    (NCCL_CUDA, 2, 1, "one GPU per rank"),
    (NCCL_CUDA, 2, 2, None),
    (GLOO_CUDA, 4, 1, None),  # four ranks folded onto one GPU
    (GLOO_CUDA, 1, 0, "needs a GPU"),
    (Placement("nccl", "cpu"), 1, 8, "CUDA tensors"),
    (GLOO_CPU, 64, 0, None)])
def test_what_the_machine_cannot_serve_is_a_value_error(placement, ranks, gpus, match):
    if match is None:
        backend.check(placement, ranks, gpus=gpus)
    else:
        with pytest.raises(ValueError, match=match):
            backend.check(placement, ranks, gpus=gpus)


def test_one_placement_serves_every_world_size_of_a_sweep():
    placements = set()
    for world_size in (1, 2, 3, 4):
        ranks = ddplab.run(rank_fns.identify, world_size)
        placements.add(ranks.placement)
        assert {(r["backend"], r["device"].split(":")[0]) for r in ranks} \
            == {(ranks.backend, ranks.device)}
    assert len(placements) == 1, placements


def test_cpu_ranks_hide_the_gpus_and_the_caller_keeps_its_environment():
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    with defaults(device="cpu"):
        ranks = ddplab.run(rank_fns.cuda_view, 2)
    assert ranks.placement == GLOO_CPU
    # Empty, not unset: the rank set it before torch touched CUDA (rank.hide_gpus).
    assert [r["visible"] for r in ranks] == ["", ""]
    assert all(not r["available"] and r["count"] == 0 and r["device"] == "cpu" for r in ranks)
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == before


@pytest.mark.skipif(GPUS > 0, reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_refused_before_any_rank_starts():
    before = descendants()
    with pytest.raises(ValueError, match="device 'cuda' needs a GPU"):
        ddplab.run(check.report, 2, device="cuda")
    with pytest.raises(ValueError, match="device 'cuda' needs a GPU"):
        ddplab.Cluster(2, backend="gloo", device="cuda")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["check", "--device", "cuda"]) == 2
    assert "needs a GPU" in err.getvalue() and "Traceback" not in err.getvalue()
    assert descendants() == before


def test_what_does_not_run_on_a_placement_is_named():
    reason = backend.unsupported("fsdp", GLOO_CUDA)
    assert "SIGSEGV" in reason and "H200" in reason and "device='cpu'" in reason
    assert backend.unsupported("fsdp", GLOO_CPU) is None
    assert backend.unsupported("fsdp", NCCL_CUDA) is None
    assert backend.unsupported("powersgd", GLOO_CUDA) is None  # lifted: see compression.py
    with pytest.raises(ValueError, match="fsdp on gloo on cuda: with gloo on CUDA tensors"):
        backend.require("fsdp", GLOO_CUDA)
    backend.require("fsdp", GLOO_CPU)


@pytest.mark.parametrize("run", [
    lambda: memory.run(world_size=2, strategy="fsdp"),
    lambda: precision.run(world_size=2, strategy="fsdp", scheme="fsdp_policy"),
    lambda: memory_step_time.run(world_size=2)])
def test_fsdp_on_gloo_with_cuda_tensors_is_refused_before_any_rank_starts(run, monkeypatch):
    """The drivers that run FSDP ask first: with gloo on CUDA asked for (as the CLI's
    ``--backend gloo --device cuda`` does) on a machine given one GPU, the refusal comes
    before any process starts."""
    monkeypatch.setattr(backend, "gpu_count", lambda: 1)
    before = descendants()
    with defaults(backend="gloo", device="cuda"), \
            pytest.raises(ValueError, match="fsdp on gloo on cuda: .*SIGSEGV"):
        run()
    assert descendants() == before


def test_fresh_processes_for_another_device_or_an_nccl_group():
    assert needs_fresh_processes(GLOO_CPU, (2, GLOO_CPU), 2, GLOO_CUDA)  # blind from the start
    assert not needs_fresh_processes(GLOO_CPU, (2, GLOO_CPU), 4, GLOO_CPU)  # re-form in place
    assert needs_fresh_processes(NCCL_CUDA, (2, NCCL_CUDA), 1, NCCL_CUDA)  # pytorch#119196
    assert needs_fresh_processes(GLOO_CUDA, (2, GLOO_CUDA), 2, NCCL_CUDA)
    assert not needs_fresh_processes(GLOO_CUDA, None, 2, NCCL_CUDA)  # no group yet


class Toy(Result):
    """A result with a to_json of its own, as several chapters' have."""

    def __init__(self, world_size):
        self.world_size = world_size

    def to_json(self):
        return {"world_size": self.world_size}


def test_a_result_records_one_placement_and_refuses_two():
    toy = Toy(4).on(Ranks([1, 2], GLOO_CPU), [Ranks([3], GLOO_CPU)], {"w": Ranks([], None)})
    assert toy.placement == GLOO_CPU and (toy.backend, toy.device) == ("gloo", "cpu")
    assert toy.to_json() == {"backend": "gloo", "device": "cpu", "world_size": 4}
    assert placement_text(toy) == "gloo on cpu, 4 ranks"
    assert placement_text(Toy(1).on(GLOO_CUDA)) == "gloo on cuda, 1 rank"
    assert Toy(2).to_json() == {"world_size": 2} and placement_text(Toy(2)) == ""
    with pytest.raises(ValueError, match="mix runs on gloo on cpu and gloo on cuda"):
        Toy(2).on(Ranks([], GLOO_CPU), Ranks([], GLOO_CUDA))


def drivers_that_forget_where_their_ranks_ran() -> list[str]:
    """Every function under chapters/ that keeps what ``ddplab.run`` returned and returns a
    result it builds (a call of a capitalised name) must record the placement with ``.on``."""
    import ast
    import pathlib

    src = pathlib.Path(ddplab.__file__).parent / "chapters"
    forgot = []
    for path in sorted(src.rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef):
                continue
            runs = any(isinstance(n, ast.Call) and ast.unparse(n.func) == "ddplab.run"
                       for n in ast.walk(fn))
            for node in ast.walk(fn):
                built = isinstance(node, ast.Return) and isinstance(node.value, ast.Call) \
                    and isinstance(node.value.func, ast.Name) and node.value.func.id[0].isupper()
                if runs and built:
                    forgot.append(f"{path.relative_to(src)}:{node.lineno} {fn.name}")
    return forgot


def test_every_driver_records_where_its_ranks_ran():
    """A result built straight from a run (``return Result(...)``, with no ``.on(...)`` after
    it) would leave ``backend`` and ``device`` out of its JSON and figures."""
    assert drivers_that_forget_where_their_ranks_ran() == []


def test_the_command_s_json_says_where_its_ranks_ran():
    report = ddplab_json("check", "--world-size", "2")
    assert {(r["backend"], r["device"].split(":")[0]) for r in report["ranks"]} \
        == {(report["backend"], report["device"])}


# ---------------------------------------------------------------- on a machine with a GPU


@pytest.mark.gpu
def test_gloo_on_one_gpu_matches_one_process():
    """The issue's H100 run: DDP over gloo with ranks on cuda:0 gave one process's gradient."""
    for world_size in (2, 4):
        with ddplab.Cluster(world_size, backend="gloo", device="cuda") as cluster:
            ranks = cluster.run(rank_fns.ddp_gradient_on_device)
        assert ranks.placement == GLOO_CUDA
        assert [r["device"] for r in ranks] == [f"cuda:{r % GPUS}" for r in range(world_size)]
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 3)  # the same start, on the host, the whole batch
        model(torch.as_tensor(ranks[0]["X"])).square().mean().backward()
        for r in ranks:
            torch.testing.assert_close(torch.as_tensor(r["grad"]), model.weight.grad)


@pytest.mark.gpu
def test_on_a_gpu_machine_cpu_ranks_see_none_and_cuda_ranks_see_all():
    with defaults(device="cpu"):
        cpu = ddplab.run(rank_fns.cuda_view, 2)
    assert all(not r["available"] and r["count"] == 0 for r in cpu)
    with ddplab.Cluster(2, backend="gloo", device="cuda") as cluster:
        cuda = cluster.run(rank_fns.cuda_view)
    assert all(r["available"] and r["count"] == GPUS for r in cuda)
    assert [r["visible"] for r in cuda] == [os.environ.get("CUDA_VISIBLE_DEVICES")] * 2


@pytest.mark.gpu
def test_fsdp_on_one_gpu_under_gloo_is_refused_before_any_rank_starts():
    before = descendants()
    with defaults(backend="gloo", device="cuda"), pytest.raises(ValueError, match="SIGSEGV"):
        memory.run(2, "fsdp")
    assert descendants() == before


@pytest.mark.gpu
def test_powersgd_runs_on_one_gpu_under_gloo():
    """Its refusal was lifted on reading (compression.py's docstring): PowerSGD at rank 1 on
    the chapter's 16 x Linear(512, 512) sends far fewer bytes than the gradient, and its
    averaged gradient is an approximation, not garbage."""
    from ddplab.chapters.time_cost import compression

    with defaults(backend="gloo", device="cuda"):
        result = compression.run(2, "powersgd")
    assert result.device == "cuda" and result.compression > 50
    assert 0 < result.grad_rel_error < 1  # 0.29 on gloo on CPU


def test_a_figure_can_say_where_its_ranks_ran():
    import matplotlib.pyplot as plt

    from ddplab.screen.style import placement_note

    fig, unknown = plt.figure(), plt.figure()
    placement_note(fig, Toy(2).on(GLOO_CUDA))
    placement_note(unknown, Toy(2))
    assert [t.get_text() for t in fig.texts] == ["gloo on cuda, 2 ranks"]
    assert unknown.texts == []
    plt.close(fig)
    plt.close(unknown)
