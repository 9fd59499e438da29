"""The two hangs of the chapter "Hangs and silent differences": each broken version hangs the
way the page says (caught within the timeout plus a few seconds, the missing ranks named,
nothing left running, the pool usable on the next call), and each fix trains what a one-process
reference computed here says it should.
"""

import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import ddplab
import rank_fns
from conftest import alive, ddplab_json, descendants
from ddplab.chapters.hangs import monitored_barrier, rank0_collective, uneven
from ddplab.common import mlp

T = 2.0  # seconds: the hang timeout of these tests


def rank_pids(world_size):
    return {r["pid"] for r in ddplab.run(rank_fns.identify, world_size)}


def test_uneven_inputs_hang_is_caught_names_the_rank_and_leaves_nothing_behind():
    pids = rank_pids(3)
    before = descendants()
    assert pids <= before
    result = uneven.run(world_size=3, extra_batches=1, fix="none", timeout=T, stacks=True)
    assert result.outcome == "hung"
    assert result.seconds < T + 5
    assert result.batches_per_rank == [2, 2, 3]
    assert result.steps_completed_per_rank == [2, 2, 2]  # the last rank is stuck in step 3
    assert result.missing_ranks == [2]  # as rank 0's monitored_barrier named it
    assert "Ranks 2 failed to pass monitoredBarrier" in result.check_in_messages[0]
    assert result.final_grads is None and "had not answered" in result.error
    # py-spy's dump, taken while it hung: the last rank inside backward, called from the loop
    # the page shows; the others at the check-in barrier
    stuck = result.stacks[2]
    assert stuck[0].startswith("_engine_run_backward (torch/autograd/graph.py:"), stuck
    assert any(frame.startswith("train_epoch (ddplab/chapters/hangs/uneven.py:")
               for frame in stuck), stuck
    for waiting in result.stacks[:2]:
        assert waiting[0].startswith("monitored_barrier (torch/distributed/"), waiting
    # Every rank process of the hung group is gone, and nothing else was left running.
    assert not any(alive(pid) for pid in pids)
    assert descendants() <= before - pids
    # The pool works on the next call, with fresh processes.
    even = uneven.run(world_size=3, extra_batches=0, fix="none", timeout=T)
    assert even.outcome == "finished" and even.missing_ranks == []
    assert rank_pids(3).isdisjoint(pids)


def test_rank0_only_evaluation_through_ddp_hangs_and_the_others_name_rank_0():
    pids = rank_pids(2)
    result = rank0_collective.run(world_size=2, fix="none", timeout=T)
    assert result.outcome == "hung" and result.seconds < T + 5
    assert result.steps_completed_per_rank == [2, 2] and result.val_loss is None
    assert result.missing_ranks == [0]
    assert "check rank 0 logs" in result.check_in_messages[1]
    assert not any(alive(pid) for pid in pids)


def one_process_uneven(world_size, counts, divide_by_initial_world_size, batch_size=4, seed=0):
    """Join's training in one process: a step's gradient is the sum of the gradients of the
    ranks that took it, over W (or over their number)."""
    model = mlp.make_model(uneven.LAYERS, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=uneven.LR)
    for step in range(max(counts)):
        active = [r for r in range(world_size) if step < counts[r]]
        X, y = mlp.make_batch(uneven.LAYERS, batch_size, world_size, seed, step)
        optimizer.zero_grad()
        for r in active:
            rows = slice(r * batch_size, (r + 1) * batch_size)
            F.mse_loss(model(X[rows]), y[rows]).backward()
        divisor = world_size if divide_by_initial_world_size else len(active)
        for p in model.parameters():
            p.grad /= divisor
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()


@pytest.mark.parametrize("divide", [True, False])
def test_join_trains_every_batch_and_matches_the_one_process_reference(divide):
    result = uneven.run(world_size=2, extra_batches=2, fix="join",
                        divide_by_initial_world_size=divide)
    assert result.outcome == "finished"
    assert result.steps_completed_per_rank == [2, 4]
    reference = one_process_uneven(2, [2, 4], divide)
    np.testing.assert_allclose(result.final_params, np.stack([reference] * 2), atol=1e-6)
    assert result.extra_step_scale == pytest.approx(0.5 if divide else 1.0, abs=1e-5)
    # The two divisors train different models: the comparison above can fail.
    other = one_process_uneven(2, [2, 4], not divide)
    assert np.abs(other - reference).max() > 1e-3


def test_min_count_trains_the_common_batches_only():
    result = uneven.run(world_size=2, extra_batches=2, fix="min-count")
    assert result.outcome == "finished"
    assert result.batches_per_rank == [2, 4]
    assert result.steps_completed_per_rank == [2, 2]
    np.testing.assert_allclose(result.final_params[1], one_process_uneven(2, [2, 2], True),
                               atol=1e-6)


def test_loader_drop_last_keeps_every_full_batch_and_still_hangs():
    """DataLoader(drop_last=True) drops a partial batch only: 2 against 3 full batches stay."""
    result = uneven.run(world_size=2, extra_batches=1, fix="loader-drop-last", timeout=T)
    assert result.outcome == "hung" and result.seconds < T + 5
    assert result.batches_per_rank == [2, 3]
    assert result.steps_completed_per_rank == [2, 2]
    assert result.missing_ranks == [1]


def test_distributed_sampler_gives_every_rank_the_same_count_by_padding():
    """What the page says of DistributedSampler.__iter__: 10 samples on 4 ranks, 3 each."""
    from torch.utils.data.distributed import DistributedSampler

    counts = [len(list(DistributedSampler(range(10), num_replicas=4, rank=r, shuffle=False)))
              for r in range(4)]
    assert counts == [3, 3, 3, 3]
    padded = list(DistributedSampler(range(10), num_replicas=4, rank=3, shuffle=False))
    assert padded == [3, 7, 1]  # index 1 is drawn a second time, wrapped from the start


def one_process_rank0_val_loss(world_size, steps=2, batch_size=8, seed=0):
    """Rank 0's validation loss after DDP training of the BatchNorm model, in one process:
    each rank's copy normalises its own rows; gradients are averaged; rank 0's buffers are the
    ones that count (broadcast_buffers: rank 0's overwrite the others' before each forward)."""
    model = mlp.make_model(rank0_collective.LAYERS, seed, norm=rank0_collective.NORM)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        X, y = mlp.make_batch(rank0_collective.LAYERS, batch_size, world_size, seed, step)
        grads, buffers = [], None
        for r in range(world_size):
            copy = mlp.make_model(rank0_collective.LAYERS, seed, norm=rank0_collective.NORM)
            copy.load_state_dict(model.state_dict())
            rows = slice(r * batch_size, (r + 1) * batch_size)
            F.mse_loss(copy(X[rows]), y[rows]).backward()
            grads.append([p.grad for p in copy.parameters()])
            buffers = buffers or {k: v.clone() for k, v in copy.state_dict().items()
                                  if "running" in k or "num_batches" in k}
        for p, *gs in zip(model.parameters(), *grads):
            p.grad = sum(gs) / world_size
        optimizer.step()
        model.load_state_dict({**model.state_dict(), **buffers})
    model.eval()
    X_val, y_val = mlp.make_batch(rank0_collective.LAYERS, 64, 1, seed, -1)
    with torch.no_grad():
        return F.mse_loss(model(X_val), y_val).item()


def test_rank0_evaluation_through_the_module_finishes_with_the_reference_loss():
    result = rank0_collective.run(world_size=2, fix="module")
    assert result.outcome == "finished" and result.missing_ranks == []
    assert result.val_loss == pytest.approx(one_process_rank0_val_loss(2), abs=1e-5)


def test_cli_uneven_reports_the_hang_as_json_within_the_timeout():
    start = time.monotonic()
    report = ddplab_json("uneven", "--world-size", "2", "--extra-batches", "1", "--fix", "none",
                         "--timeout", "2")
    elapsed = time.monotonic() - start
    assert report["outcome"] == "hung" and report["fix"] == "none"
    assert report["seconds"] < 2 + 5
    assert report["batches_per_rank"] == [2, 3]
    assert report["steps_completed_per_rank"] == [2, 2]
    assert report["missing_ranks"] == [1]
    assert elapsed < 60  # interpreter start included; the hang itself is report["seconds"]


def test_cli_rank0_collective_reports_the_hang_as_json():
    hung = ddplab_json("rank0-collective", "--world-size", "2", "--fix", "none",
                       "--timeout", "2")
    assert hung["outcome"] == "hung" and hung["missing_ranks"] == [0]
    assert hung["seconds"] < 2 + 5


def test_cli_uneven_join_prints_each_ranks_final_gradient():
    report = ddplab_json("uneven", "--world-size", "2", "--fix", "join")
    assert report["outcome"] == "finished"
    assert np.asarray(report["final_grads"]).shape[0] == 2


@pytest.mark.parametrize("run, kwargs, match", [
    (uneven.run, {"fix": "later"}, "fix must be one of"),
    (uneven.run, {"fix": "drop-last"}, "fix must be one of"),
    (uneven.run, {"world_size": 1}, "world_size must be between 2"),
    (uneven.run, {"extra_batches": -1}, "extra_batches"),
    (uneven.run, {"timeout": 0}, "timeout"),
    (rank0_collective.run, {"fix": "all"}, "fix must be one of"),
    (rank0_collective.run, {"batch_size": 1}, "batch_size"),
])
def test_bad_input_fails_before_any_rank_starts(run, kwargs, match):
    before = descendants()
    with pytest.raises(ValueError, match=match):
        run(**kwargs)
    assert descendants() <= before


def test_the_labs_dropdown_shows_the_chosen_panel_only():
    import ipywidgets

    from ddplab.screen import widgets

    panels = {"uneven_inputs": ipywidgets.Label("a"), "batchnorm": ipywidgets.Label("b")}
    chooser = widgets.choose(**panels)
    dropdown, box = chooser.children
    assert dropdown.options == (("uneven inputs", "uneven_inputs"), ("batchnorm", "batchnorm"))
    assert box.children == (panels["uneven_inputs"],)
    dropdown.value = "batchnorm"
    assert box.children == (panels["batchnorm"],)


@pytest.mark.parametrize("wait_all_ranks, named", [(False, "Rank 1 failed"),
                                                   (True, "Ranks 1, 2 failed")])
def test_monitored_barrier_names_every_absent_rank_only_with_wait_all_ranks(wait_all_ranks,
                                                                            named):
    result = monitored_barrier.run(world_size=3, absent=(1, 2), wait_all_ranks=wait_all_ranks)
    assert named + " to pass monitoredBarrier in 500 ms" in result.rank0_message
