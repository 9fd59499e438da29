"""The chapter "Your training loop under DDP": each broken version fails the way the page says
(the real error text, the hang caught within its timeout with nothing left running) and each
fix matches one process on the whole batch, computed here without DDP."""

import math

import numpy as np
import pytest
import torch.nn.functional as F

import ddplab
import rank_fns
from conftest import alive, ddplab_json
from ddplab.chapters.training_loop import (
    checkpointing,
    clipping,
    early_stop,
    evaluation,
    mixed_precision,
    printing,
    seeds,
    torch_compile,
)
from ddplab.common.mlp import make_batch, make_model

T = 2.0


def test_clip_after_ddp_backward_is_the_one_process_clip_and_the_two_wrong_norms():
    result = clipping.run(world_size=2, max_norm=0.5)
    # one process, written out here: the full batch's gradient norm, then the clipped step
    model = make_model(clipping.LAYERS, 0)
    X, y = make_batch(clipping.LAYERS, 4, 2, 0, 0)
    F.mse_loss(model(X), y).backward()
    norm = math.sqrt(sum(float((p.grad ** 2).sum()) for p in model.parameters()))
    assert result.norm_per_rank == pytest.approx([norm] * 2, rel=1e-5)
    assert result.norm_one_process == pytest.approx(norm, rel=1e-5)
    assert result.max_param_diff_vs_one_process < 1e-6
    # all-reducing the norm again: sqrt(W) too large; clipping locally: each rank's own norm
    assert result.norm_reduced_again_per_rank[0] == pytest.approx(norm * math.sqrt(2), rel=1e-5)
    assert result.max_param_diff_reduced_again_vs_one_process > 1e-3
    assert result.norm_local_per_rank[0] != pytest.approx(norm, rel=1e-3)
    assert result.max_param_diff_local_vs_one_process > 1e-3


def test_clip_cli_json():
    data = ddplab_json("clip", "--world-size", "2", "--max-norm", "0.5")
    for field in ("norm_one_process", "norm_per_rank", "norm_local_per_rank",
                  "max_param_diff_vs_one_process"):
        assert field in data
    assert data["max_param_diff_vs_one_process"] < 1e-6


def test_gathered_auc_is_one_process_auc_and_padding_changes_it():
    result = evaluation.run(world_size=3, dataset_size=10)
    scores, labels = evaluation.validation_set(10, 0)
    pos, neg = scores[labels == 1], scores[labels == 0]
    reference = np.mean([[float(p > n) for n in neg] for p in pos])
    assert result.metric_one_process == pytest.approx(reference)
    assert result.metric_gathered == pytest.approx(reference)
    assert result.metric_all_gather_object == pytest.approx(reference)
    assert result.predictions_per_rank == [4, 3, 3]
    assert result.padded_predictions == 12
    assert result.metric_padded_sampler != pytest.approx(reference)


@pytest.mark.parametrize("shuffle", [False, True])
def test_gathered_then_cut_is_exact_only_interleaved(shuffle):
    """10 samples on 4 ranks through a padded DistributedSampler: the sampler's order, worked
    out here in one process, is what the interleaved gather keeps; rank by rank, the cut keeps
    a repeated sample and drops a real one, and the AUC moves."""
    from torch.utils.data import DistributedSampler

    result = evaluation.gather_cut(world_size=4, dataset_size=10, shuffle=shuffle)
    per_rank = [list(DistributedSampler(range(10), num_replicas=4, rank=r, shuffle=shuffle,
                                        seed=0)) for r in range(4)]
    assert result.samples_per_rank == per_rank
    order = [per_rank[i % 4][i // 4] for i in range(12)]  # position i went to rank i % 4
    assert result.kept_interleaved == order[:10] and sorted(order[:10]) == list(range(10))
    assert result.kept_rank_by_rank == sum(per_rank, [])[:10]
    assert len(result.repeated) == 1 and len(result.missing) == 1
    scores, labels = evaluation.validation_set(10, 0)
    pos, neg = scores[labels == 1], scores[labels == 0]
    reference = np.mean([[float(p > n) for n in neg] for p in pos])
    assert result.metric_interleaved == pytest.approx(reference)
    assert result.metric_rank_by_rank != pytest.approx(reference)


def test_gathered_then_cut_rank_by_rank_is_right_by_luck_with_one_padded_sample():
    """One padded sample sits last on the last rank: the cut removes it either way."""
    result = evaluation.gather_cut(world_size=2, dataset_size=9)
    assert result.kept_rank_by_rank == [0, 2, 4, 6, 8, 1, 3, 5, 7]
    assert result.kept_interleaved == list(range(9))
    assert result.repeated == [] and result.missing == []
    with pytest.raises(ValueError, match="shuffle"):
        evaluation.gather_cut(shuffle=1)


def test_plain_all_gather_of_unequal_shards_raises_on_gloo():
    message = evaluation.unequal_all_gather_error(world_size=3, dataset_size=10)
    assert message.startswith("ProcessGroupGloo::allgather: invalid tensor size")


def test_reentrant_checkpointing_raises_and_each_fix_matches_one_process():
    broken = checkpointing.run(setup="reentrant")
    assert broken.error.startswith("Expected to mark a variable ready only once")
    for setup in ("non-reentrant", "reentrant-static-graph", "reentrant-no-search"):
        fixed = checkpointing.run(setup=setup)
        assert fixed.error is None and fixed.max_diff_vs_one_process < 1e-6


def test_one_ranks_overflow_makes_every_rank_skip_under_ddp():
    result = mixed_precision.run(world_size=2, overflow_rank=1)
    assert result.skipped_per_rank == [True, True]
    assert result.scale_per_rank == [2.0 ** 15] * 2
    assert result.skipped_without_ddp_per_rank == [False, True]
    clean = mixed_precision.run(world_size=2, overflow_rank=-1)
    assert clean.skipped_per_rank == [False, False] and clean.replicas_equal


def test_early_stop_on_one_rank_hangs_and_the_all_reduced_decision_finishes():
    pids = {r["pid"] for r in ddplab.run(rank_fns.identify, 2)}
    hung = early_stop.run(world_size=2, fix="none", timeout=T)
    assert hung.outcome == "hung" and hung.seconds < T + 5
    assert hung.stopped_at_step_per_rank == [None, 1]
    assert hung.missing_ranks == [0]
    assert not any(alive(pid) for pid in pids)
    fixed = early_stop.run(world_size=2, fix="all-reduce", timeout=30)
    assert fixed.outcome == "finished"
    assert fixed.stopped_at_step_per_rank == [1, 1]


def test_bad_input_is_a_value_error():
    with pytest.raises(ValueError, match="fix"):
        early_stop.run(fix="patience")
    with pytest.raises(ValueError, match="max_norm"):
        clipping.run(max_norm=0)
    with pytest.raises(ValueError, match="dataset_size"):
        evaluation.run(world_size=3, dataset_size=4)
    with pytest.raises(ValueError, match="steps"):
        printing.run(steps=0)


def test_f1_is_exact_from_all_reduced_counts_but_not_the_mean_of_ranks_f1():
    # F1 = 2 TP / (2 TP + FP + FN) is a function of sums: all-reducing the counts is enough
    from ddplab.chapters.training_loop.evaluation import validation_set

    scores, labels = validation_set(30, 0)
    predicted, truth = scores > 0.5, labels == 1
    tp, fp = (predicted & truth).sum(), (predicted & ~truth).sum()
    fn = (~predicted & truth).sum()
    one_process = 2 * tp / (2 * tp + fp + fn)
    results = ddplab.run(rank_fns.f1_from_counts, 3, dataset_size=30, seed=0)
    assert all(r["f1"] == pytest.approx(one_process, abs=1e-12) for r in results)
    mean_of_ranks = np.mean([r["local_f1"] for r in results])
    assert abs(mean_of_ranks - one_process) > 1e-3  # the shortcut the page warns against


def test_ddp_optimizer_splits_the_compiled_graph_at_bucket_boundaries():
    split = torch_compile.run(world_size=2, bucket_cap_mb=1.0)
    assert split.graphs == split.buckets == 3
    assert split.max_diff_vs_one_process < 1e-6
    whole = torch_compile.run(world_size=2, bucket_cap_mb=1.0, optimize_ddp=False)
    assert whole.graphs == 1 and whole.buckets == 3
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        torch_compile.run(bucket_cap_mb=0.5)
    # ...which torch itself refuses at the first forward, in DDPOptimizer.__init__
    assert torch_compile.small_cap_error(world_size=1, bucket_cap_mb=0.5).startswith(
        "First bucket should be smaller/equal to other buckets")
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        torch_compile.small_cap_error(bucket_cap_mb=1.0)
    # torch.compile(DDP(model)): graph breaks in DDP's forward, then dynamo starts no frame in
    # nn.Sequential.forward (torch's own file), so a bare Sequential gets no graph at all...
    bare = torch_compile.run(world_size=2, outside=True)
    assert bare.graphs == 0 and bare.graph_breaks > 0
    assert bare.saved_key == "0.weight"  # DDP's module is the plain model here
    # ...while the same layers in a class of one's own get DDPOptimizer's split either way
    for outside in (False, True):
        own = torch_compile.run(world_size=2, outside=outside, model_kind="module")
        assert own.graphs == own.buckets == 3 and own.max_diff_vs_one_process < 1e-6
        # torch.compile's wrapper keeps the model as _orig_mod, in the saved keys too
        assert own.saved_key == ("layers.0.weight" if outside else "_orig_mod.layers.0.weight")
    with pytest.raises(ValueError, match="model_kind"):
        torch_compile.run(model_kind="mlp")


def test_same_seed_on_every_rank_draws_the_same_augmentations_also_in_workers():
    import random

    import torch
    state = torch.get_rng_state(), random.getstate()
    same = seeds.run(world_size=2, seeding="same", workers=2)
    assert same.main_same_on_every_rank and same.workers_same_on_every_rank
    # worker i seeds torch with base_seed + i: the two workers' draws differ
    assert same.workers_per_rank[0][0] != same.workers_per_rank[0][1]
    per_rank = seeds.run(world_size=2, seeding="seed+rank", workers=2)
    assert not per_rank.main_same_on_every_rank and not per_rank.workers_same_on_every_rank
    assert (torch.get_rng_state() == state[0]).all() and random.getstate() == state[1]


def test_with_accumulation_only_the_clip_at_the_syncing_micro_batch_is_one_process():
    result = clipping.accumulate(world_size=2, max_norm=0.5, batch_size=4, micro_batches=2)
    assert result.max_diff_clip_at_last < 1e-6
    assert result.max_diff_clip_every_micro_batch > 1e-3
    with pytest.raises(ValueError, match="multiple of micro_batches"):
        clipping.accumulate(batch_size=3, micro_batches=2)


def test_early_stop_cli_json_reports_the_hang():
    data = ddplab_json("early-stop", "--world-size", "2", "--fix", "none", "--timeout", "2")
    assert data["outcome"] == "hung" and data["seconds"] < 2 + 5
    assert data["stopped_at_step_per_rank"] == [None, 1]


def test_every_rank_prints_its_own_loss_and_rank_0_prints_the_global_batchs_once():
    import torch

    result = printing.run(world_size=3, steps=3, batch_size=4)
    # one process on the global batch of 12, written out here; and at step 0 (the same
    # initial weights everywhere) each rank's own loss on its 4 rows
    model = make_model(printing.LAYERS, 0)
    optimizer = torch.optim.SGD(model.parameters(), lr=printing.LR)
    reference = []
    for step in range(3):
        X, y = make_batch(printing.LAYERS, 4, 3, 0, step)
        if step == 0:
            with torch.no_grad():
                own = [float(F.mse_loss(model(X[r * 4:r * 4 + 4]), y[r * 4:r * 4 + 4]))
                       for r in range(3)]
        loss = F.mse_loss(model(X), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        reference.append(loss.item())
    assert result.lines_per_rank == {"every-rank": [3, 3, 3], "rank-0": [3, 0, 0],
                                     "rank-0-all-reduced": [3, 0, 0]}
    assert result.losses("rank-0-all-reduced")[0] == pytest.approx(reference, abs=1e-5)
    assert [losses[0] for losses in result.losses("every-rank")] == pytest.approx(own, abs=1e-5)
    assert result.losses("rank-0")[0] == result.losses("every-rank")[0]
    # the comparison can fail: a rank's own loss is not the global batch's
    assert min(abs(o - reference[0]) for o in own) > 1e-2
    assert result.max_diff_vs_one_process["rank-0"] > 1e-2
    # a later call counts its own lines only, not those already in the ranks' logs
    again = printing.run(world_size=2, steps=2)
    assert again.lines_per_rank["every-rank"] == [2, 2]
    assert again.lines_per_rank["rank-0-all-reduced"] == [2, 0]
