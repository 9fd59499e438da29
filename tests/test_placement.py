"""Where ranks run (engine/placement.py): one backend and device per process, set through one
door (``ddplab.placed``), resolved once, refused before any rank starts where the machine cannot
serve it, recorded in every result; CPU ranks blind to the GPUs. The rules are checked for GPU
counts given by hand, so they hold on any machine; what needs a real GPU is marked ``gpu``."""

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
from ddplab.engine import placement
from ddplab.engine.placement import Placement, Ranks, needs_fresh_processes, resolve

GLOO_CPU, GLOO_CUDA = Placement("gloo", "cpu"), Placement("gloo", "cuda")
NCCL_CUDA = Placement("nccl", "cuda")
GPUS = torch.cuda.device_count()


@pytest.mark.parametrize("gpus, expected", [(0, GLOO_CPU), (1, GLOO_CPU), (2, NCCL_CUDA),
                                            (8, NCCL_CUDA)])
def test_auto_is_nccl_on_cuda_only_with_two_gpus_or_more(gpus, expected):
    # One GPU could serve NCCL at world size 1 only (NVIDIA/nccl#418): a sweep would switch.
    assert resolve(gpus=gpus, environ={}) == expected


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
@pytest.mark.parametrize("largest", [1, 2, 4, 8, 16])
def test_auto_serves_the_largest_world_size_said_on_1_2_4_and_8_gpus(gpus, largest):
    """A lab that goes to ``largest`` ranks gets NCCL where there is a GPU for each of them,
    else gloo on CPU for all of them: never NCCL up to the GPUs and a ValueError after."""
    chosen = resolve(gpus=gpus, ranks=largest, environ={})
    assert chosen == (NCCL_CUDA if gpus >= largest else GLOO_CPU)
    assert chosen.most_ranks(gpus) >= largest  # it serves the whole range
    for world_size in range(1, largest + 1):
        placement.check(chosen, world_size, gpus=gpus)


def test_under_torchrun_auto_is_nccl_with_a_gpu_per_process():
    # torchrun's ranks per host are the largest world size one host serves
    assert resolve(gpus=1, ranks=1, environ={}) == NCCL_CUDA
    assert resolve(gpus=1, ranks=2, environ={}) == GLOO_CPU
    assert resolve(gpus=0, ranks=1, environ={}) == GLOO_CPU


@pytest.mark.parametrize("env, gpus, expected", [
    ({"DDPLAB_DEVICE": "cuda"}, 1, GLOO_CUDA),  # several ranks' CUDA code on one GPU
    ({"DDPLAB_DEVICE": "cuda"}, 2, NCCL_CUDA),
    ({"DDPLAB_DEVICE": "cpu"}, 8, GLOO_CPU),
    ({"DDPLAB_BACKEND": "gloo"}, 8, GLOO_CPU),
    ({"DDPLAB_BACKEND": "nccl"}, 1, NCCL_CUDA),  # asked for; check() refuses W=2 later
    ({"DDPLAB_BACKEND": "gloo", "DDPLAB_DEVICE": "cuda"}, 8, GLOO_CUDA)])
def test_the_environment_decides_what_auto_means(env, gpus, expected):
    assert resolve(gpus=gpus, environ=env) == expected


@pytest.mark.parametrize("asked, gpus, expected", [
    (("gloo", "auto"), 8, GLOO_CPU),  # gloo alone means CPU: DDPLAB_BACKEND=gloo's advice
    (("auto", "cpu"), 8, GLOO_CPU),  # NCCL cannot serve CPU tensors
    (("nccl", "auto"), 0, NCCL_CUDA),  # NCCL implies CUDA (refused later: no GPU)
    (("auto", "cuda"), 1, GLOO_CUDA),
    (("gloo", "cuda"), 8, GLOO_CUDA)])
def test_what_is_asked_for_beats_what_auto_would_choose(asked, gpus, expected):
    assert resolve(*asked, gpus=gpus, environ={}) == expected
    # the environment says what "auto" means, nothing more
    assert resolve("gloo", "cuda", gpus=gpus, environ={"DDPLAB_BACKEND": "nccl",
                                                       "DDPLAB_DEVICE": "cpu"}) == GLOO_CUDA


def test_a_bad_environment_value_names_the_variable():
    with pytest.raises(ValueError, match="DDPLAB_BACKEND"):
        resolve(gpus=0, environ={"DDPLAB_BACKEND": "mpi"})


@pytest.mark.parametrize("where, ranks, gpus, match", [
    (NCCL_CUDA, 2, 1, "one GPU per rank"),
    (NCCL_CUDA, 2, 2, None),
    (GLOO_CUDA, 4, 1, None),  # four ranks folded onto one GPU
    (GLOO_CUDA, 1, 0, "needs a GPU"),
    (Placement("nccl", "cpu"), 1, 8, "CUDA tensors"),
    (GLOO_CPU, 64, 0, None)])
def test_what_the_machine_cannot_serve_is_a_value_error(where, ranks, gpus, match):
    if match is None:
        placement.check(where, ranks, gpus=gpus)
    else:
        with pytest.raises(ValueError, match=match):
            placement.check(where, ranks, gpus=gpus)


def test_a_panel_says_why_its_slider_stops():
    assert NCCL_CUDA.most_ranks(4) == 4 and GLOO_CUDA.most_ranks(1) == placement.MAX_WORLD_SIZE
    assert NCCL_CUDA.limit_note(4) == \
        "4 GPUs: up to 4 ranks on NCCL; DDPLAB_BACKEND=gloo for more ranks on CPU"


# ---------------------------------------------------------------- the door


def test_placed_sets_the_process_s_placement_and_a_block_restores_it(monkeypatch):
    before = ddplab.placement()
    with ddplab.placed(device="cpu") as where:
        assert where == ddplab.placement() == GLOO_CPU
        inner = ddplab.placed(backend="gloo", device="cpu", largest_world_size=3)
        with inner as where:
            assert where == GLOO_CPU and placement._asked == ("gloo", "cpu", 3)
            # what a notebook cell that calls it shows
            assert repr(inner) == "ddplab.placed: gloo on cpu, up to 3 ranks"
        assert placement._asked == ("auto", "cpu", None)
        # resolved once: the environment read at the first use, not at every call
        monkeypatch.setenv(placement.DEVICE_ENV, "cuda")
        assert ddplab.placement() == GLOO_CPU
    assert ddplab.placement() == before
    setter = ddplab.placed(backend="gloo")  # the call alone: for the process, from now on
    try:
        assert placement._asked == ("gloo", "auto", None)
    finally:
        setter.__exit__(None, None, None)
    assert ddplab.placement() == before


def test_bad_placements_are_refused_before_anything_changes():
    before = placement._asked
    for bad in ({"backend": "mpi"}, {"device": "tpu"}, {"largest_world_size": 0},
                {"largest_world_size": 65}, {"largest_world_size": True}):
        with pytest.raises(ValueError):
            ddplab.placed(**bad)
    assert placement._asked == before


def test_one_placement_serves_every_world_size_of_a_sweep():
    placements = set()
    for world_size in (1, 2, 3, 4):
        ranks = ddplab.run(rank_fns.identify, world_size)
        placements.add(ranks.placement)
        assert {(r["backend"], r["device"].split(":")[0]) for r in ranks} \
            == {(ranks.backend, ranks.device)}
    assert len(placements) == 1, placements


def test_a_world_size_beyond_the_largest_said_is_refused_before_any_rank_starts():
    before = descendants()
    with ddplab.placed(largest_world_size=2):
        with pytest.raises(ValueError, match=r"largest_world_size=2\).*placed\(largest_world_"):
            ddplab.run(rank_fns.identify, 3)
        with pytest.raises(ValueError, match="largest_world_size=2"):
            ddplab.Cluster(3)
    assert descendants() == before
    assert len(ddplab.run(rank_fns.identify, 3)) == 3  # outside the block: no such limit


def test_cpu_ranks_hide_the_gpus_and_the_caller_keeps_its_environment():
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    with ddplab.placed(device="cpu"):
        ranks = ddplab.run(rank_fns.cuda_view, 2)
    assert ranks.placement == GLOO_CPU
    # Empty, not unset: the rank set it before torch touched CUDA (rank.hide_gpus).
    assert [r["visible"] for r in ranks] == ["", ""]
    assert all(not r["available"] and r["count"] == 0 and r["device"] == "cpu" for r in ranks)
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == before


@pytest.mark.skipif(GPUS > 0, reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_refused_before_any_rank_starts():
    before = descendants()
    with ddplab.placed(device="cuda"):
        with pytest.raises(ValueError, match="device 'cuda' needs a GPU"):
            ddplab.run(check.report, 2)
    with ddplab.placed(backend="gloo", device="cuda"):
        with pytest.raises(ValueError, match="device 'cuda' needs a GPU"):
            ddplab.Cluster(2)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["check", "--device", "cuda"]) == 2
    assert "needs a GPU" in err.getvalue() and "Traceback" not in err.getvalue()
    assert descendants() == before


def test_what_does_not_run_on_a_placement_is_named():
    reason = placement.unsupported("fsdp", GLOO_CUDA)
    assert "SIGSEGV" in reason and "H200" in reason and "device='cpu'" in reason
    assert placement.unsupported("fsdp", GLOO_CPU) is None
    assert placement.unsupported("fsdp", NCCL_CUDA) is None
    assert placement.unsupported("powersgd", GLOO_CUDA) is None  # lifted: see compression.py
    with pytest.raises(ValueError, match="fsdp on gloo on cuda: with gloo on CUDA tensors"):
        placement.require("fsdp", GLOO_CUDA)
    placement.require("fsdp", GLOO_CPU)


@pytest.mark.parametrize("run", [
    lambda: memory.run(world_size=2, strategy="fsdp"),
    lambda: precision.run(world_size=2, strategy="fsdp", scheme="fsdp_policy"),
    lambda: memory_step_time.run(world_size=2)])
def test_fsdp_on_gloo_with_cuda_tensors_is_refused_before_any_rank_starts(run, monkeypatch):
    """The drivers that run FSDP ask first: with gloo on CUDA asked for (as the CLI's
    ``--backend gloo --device cuda`` does) on a machine given one GPU, the refusal comes
    before any process starts."""
    monkeypatch.setattr(placement, "gpu_count", lambda: 1)
    before = descendants()
    with ddplab.placed(backend="gloo", device="cuda"), \
            pytest.raises(ValueError, match="fsdp on gloo on cuda: .*SIGSEGV"):
        run()
    assert descendants() == before


def test_fresh_processes_for_another_placement_or_an_nccl_group_of_another_size():
    assert needs_fresh_processes(GLOO_CPU, 2, 2, GLOO_CUDA)  # blind from the start
    assert needs_fresh_processes(GLOO_CUDA, None, 2, NCCL_CUDA)  # a rank learns it at start
    assert not needs_fresh_processes(GLOO_CPU, 2, 4, GLOO_CPU)  # re-form in place
    assert needs_fresh_processes(NCCL_CUDA, 2, 1, NCCL_CUDA)  # pytorch#119196
    assert not needs_fresh_processes(NCCL_CUDA, 2, 2, NCCL_CUDA)
    assert not needs_fresh_processes(NCCL_CUDA, None, 4, NCCL_CUDA)  # no group yet


def test_the_same_placement_asked_anew_keeps_the_rank_processes():
    """A change of placement starts fresh ones (``needs_fresh_processes`` above); one that
    resolves to the same placement keeps the warm ranks."""
    with ddplab.placed(backend="gloo", device="cpu"):
        first = {r["pid"] for r in ddplab.run(rank_fns.identify, 2)}
    with ddplab.placed(device="cpu"):
        assert {r["pid"] for r in ddplab.run(rank_fns.identify, 2)} == first


# ---------------------------------------------------------------- recorded in every result


class Toy(Result):
    """A result that shapes its own JSON, as several chapters' do."""

    def __init__(self, world_size):
        self.world_size = world_size

    def json_fields(self):
        return {"world_size": self.world_size}


def test_a_result_records_one_placement_and_refuses_two():
    toy = Toy.from_ranks([Ranks([1, 2], GLOO_CPU), [Ranks([3], GLOO_CPU)],
                          {"w": Ranks([], None)}], 4)
    assert toy.placement == GLOO_CPU and (toy.backend, toy.device) == ("gloo", "cpu")
    assert toy.to_json() == {"backend": "gloo", "device": "cpu", "world_size": 4}
    assert list(toy.to_json())[:2] == ["backend", "device"]
    assert placement_text(toy) == "gloo on cpu, 4 ranks"
    assert placement_text(Toy.from_ranks(GLOO_CUDA, world_size=1)) == "gloo on cuda, 1 rank"
    assert Toy(2).to_json() == {"world_size": 2} and placement_text(Toy(2)) == ""
    with pytest.raises(ValueError, match="mix runs on gloo on cpu and gloo on cuda"):
        Toy.from_ranks((Ranks([], GLOO_CPU), Ranks([], GLOO_CUDA)), 2)


def test_a_result_whose_fields_name_ranks_still_records_where_they_ran():
    """``from_ranks``' first argument is positional only: a field named ``ranks`` (the check
    command's per-rank reports) is a field."""
    result = check.run(2)
    assert result.placement == ddplab.placement() and len(result.ranks) == 2


def test_the_command_s_json_says_where_its_ranks_ran():
    report = ddplab_json("check", "--world-size", "2")  # conftest checks backend and device
    assert {(r["backend"], r["device"].split(":")[0]) for r in report["ranks"]} \
        == {(report["backend"], report["device"])}


# ---------------------------------------------------------------- on a machine with a GPU


@pytest.mark.gpu
def test_gloo_on_one_gpu_matches_one_process():
    """The issue's H100 run: DDP over gloo with ranks on cuda:0 gave one process's gradient."""
    for world_size in (2, 4):
        with ddplab.placed(backend="gloo", device="cuda"), ddplab.Cluster(world_size) as cluster:
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
    with ddplab.placed(device="cpu"):
        cpu = ddplab.run(rank_fns.cuda_view, 2)
    assert all(not r["available"] and r["count"] == 0 for r in cpu)
    with ddplab.placed(backend="gloo", device="cuda"), ddplab.Cluster(2) as cluster:
        cuda = cluster.run(rank_fns.cuda_view)
    assert all(r["available"] and r["count"] == GPUS for r in cuda)
    assert [r["visible"] for r in cuda] == [os.environ.get("CUDA_VISIBLE_DEVICES")] * 2


@pytest.mark.gpu
def test_fsdp_on_one_gpu_under_gloo_is_refused_before_any_rank_starts():
    before = descendants()
    with ddplab.placed(backend="gloo", device="cuda"), \
            pytest.raises(ValueError, match="SIGSEGV"):
        memory.run(2, "fsdp")
    assert descendants() == before


@pytest.mark.gpu
def test_powersgd_runs_on_one_gpu_under_gloo():
    """Its refusal was lifted on reading (compression.py's docstring): PowerSGD at rank 1 on
    the chapter's 16 x Linear(512, 512) sends far fewer bytes than the gradient, and its
    averaged gradient is an approximation, not garbage."""
    from ddplab.chapters.time_cost import compression

    with ddplab.placed(backend="gloo", device="cuda"):
        result = compression.run(2, "powersgd")
    assert result.device == "cuda" and result.compression > 50
    assert 0 < result.grad_rel_error < 1  # 0.29 on gloo on CPU


def test_a_figure_can_say_where_its_ranks_ran():
    import matplotlib.pyplot as plt

    from ddplab.screen.style import placement_note

    fig, unknown = plt.figure(), plt.figure()
    placement_note(fig, Toy.from_ranks(GLOO_CUDA, 2))
    placement_note(unknown, Toy(2))
    assert [t.get_text() for t in fig.texts] == ["gloo on cuda, 2 ranks"]
    assert unknown.texts == []
    plt.close(fig)
    plt.close(unknown)
