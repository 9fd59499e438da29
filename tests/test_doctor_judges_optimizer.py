"""The judges around the optimizer step (``judges/optimizer.py``) on hand-built records, one
test per branch: ``clip-before-unscale``, ``lr-not-scaled``."""

from __future__ import annotations

from ddplab.doctor.judging.findings import Status
from ddplab.doctor.judging.judges import optimizer, shards
from ddplab.doctor.records import Clip, Mode, Optimizer, WorldSizeRead
from judge_records import FILE, earlier_finding, evidence, judge, step


def clipped(**changes):
    fields = dict(file=FILE, line=73, how="clip_grad_norm_", scaled=True, scale=65536.0,
                  norm=39645.6640625, limit=1.0)
    clip = Clip(**{**fields, **changes})
    return evidence({0: [clip, clip], 1: [clip, clip]})


def test_clip_before_unscale_found_where_the_true_norm_is_under_the_limit():
    got = judge(optimizer.CLIP_BEFORE_UNSCALE, clipped())
    assert got.status == Status.FOUND
    assert got.why == ("clip_grad_norm_ at train.py:73 clips gradients that the GradScaler has "
                       "scaled and not yet unscaled (no scaler.unscale_(optimizer) before it): "
                       "it measured a norm of 3.965e+04, the true norm 0.6049 times the scale "
                       "6.554e+04, so clipping to 1 shrinks the gradients 3.965e+04x where they "
                       "needed not at all (the true norm is under the limit)")
    assert got.problems[0].line == 73


def test_clip_before_unscale_found_where_the_true_norm_needed_clipping():
    got = judge(optimizer.CLIP_BEFORE_UNSCALE, clipped(norm=196608.0))
    assert got.status == Status.FOUND and got.problems[0].evidence["true_norm"] == 3.0
    assert got.why.endswith("shrinks the gradients 1.966e+05x where they needed 3x")


def test_clip_before_unscale_found_without_a_norm_to_show():
    got = judge(optimizer.CLIP_BEFORE_UNSCALE, clipped(how="clip_grad_value_", norm=None,
                                                       limit=0.5))
    assert got.status == Status.FOUND
    assert got.why.startswith("clip_grad_value_ at train.py:73 clips")
    assert got.why.endswith("(no scaler.unscale_(optimizer) before it)")


def test_clip_before_unscale_passes_clipping_after_unscale():
    got = judge(optimizer.CLIP_BEFORE_UNSCALE, clipped(scaled=False, norm=0.6049))
    assert got.status == Status.PASSED
    assert got.why.startswith("2 clipping calls, none on gradients still scaled")


def test_clip_before_unscale_not_applicable_without_clipping():
    got = judge(optimizer.CLIP_BEFORE_UNSCALE, evidence({0: [step(1)], 1: [step(1)]}))
    assert got.status == Status.NOT_APPLICABLE and "no clip_grad_norm_" in got.why


SGD = Optimizer(file=FILE, line=42, index=0, type="SGD", lr=[0.001])
READ = WorldSizeRead(file=FILE, line=12, how="dist.get_world_size()")


def scaled(lr=0.001, probe=None, read=False, kind="SGD", batch=8, mode=Mode.RANKS, digests=None,
           ranks=(0, 1)):
    """Every rank: its optimizer, maybe a read of the world size, and a first step of one
    micro-step of ``batch`` samples at ``lr``; ``probe``: (batch, lr) of a one-rank run."""
    first = step(1, lr=[lr], optimizer_type=kind, batch=batch, digests=digests)
    ev = evidence({r: [SGD, *([READ] if read else []), first] for r in ranks}, mode=mode)
    if probe:
        ev.probe = evidence({0: [step(1, lr=[probe[1]], optimizer_type=kind, batch=probe[0])]})
    return ev


def test_lr_not_scaled_found_where_nothing_follows_the_world_size():
    got = judge(optimizer.LR_NOT_SCALED, scaled())
    assert got.status == Status.FOUND
    assert got.why == ("the global batch grows with the world size (8 samples per step on one "
                       "rank, 16 on 2) and the LR does not (0.001 on both): linear scaling would "
                       "give 0.002, square-root scaling 0.001414")
    assert got.problems[0].line == 42  # where the optimizer was made


def test_lr_not_scaled_found_against_the_one_rank_run():
    got = judge(optimizer.LR_NOT_SCALED, scaled(0.005, probe=(8, 0.005), read=True,
                                                kind="AdamW"))
    assert got.status == Status.FOUND
    assert "(8 samples per step on one rank, 16 on 2) and the LR does not (0.005" in got.why
    assert got.why.endswith(" (Adam-type optimizers tolerate this better than SGD)")


def test_lr_not_scaled_passes_a_global_batch_that_stays():
    """The script divides a global batch of 16 by the world size: 16 alone, 8 a rank."""
    got = judge(optimizer.LR_NOT_SCALED, scaled(probe=(16, 0.001), read=True))
    assert got.status == Status.PASSED
    assert got.why == "the global batch is 16 samples on 2 ranks, as on one"


def test_lr_not_scaled_passes_an_lr_that_follows_the_world_size():
    got = judge(optimizer.LR_NOT_SCALED, scaled(0.02, probe=(8, 0.01), read=True))
    assert got.status == Status.PASSED
    assert got.why == "the LR follows the world size: 0.01 on one rank, 0.02 on 2"


def test_lr_not_scaled_not_applicable_where_the_script_reads_the_world_size_unprobed():
    got = judge(optimizer.LR_NOT_SCALED, scaled(read=True))
    assert got.status == Status.NOT_APPLICABLE
    assert got.why.startswith("the script reads the world size (dist.get_world_size() at "
                              "train.py:12) before its first step, and no one-rank run")


def test_lr_not_scaled_not_applicable_without_a_batch_size():
    got = judge(optimizer.LR_NOT_SCALED, scaled(batch=None))
    assert got.status == Status.NOT_APPLICABLE
    assert got.why == "no optimizer step after DDP forwards"


def test_lr_not_scaled_not_applicable_where_every_rank_got_the_same_batch():
    got = judge(optimizer.LR_NOT_SCALED, scaled(digests=["7ae16f899ca36322"]))
    assert got.status == Status.NOT_APPLICABLE
    assert "the same batch (digest 7ae16f899ca36322)" in got.why


def test_lr_not_scaled_not_applicable_where_same_batches_found():
    got = judge(optimizer.LR_NOT_SCALED, scaled(), [earlier_finding(shards.SAME_BATCHES)])
    assert got.status == Status.NOT_APPLICABLE and got.why.startswith("explained by same-batches")


def test_lr_not_scaled_not_applicable_to_a_spawning_script_or_one_rank():
    got = judge(optimizer.LR_NOT_SCALED, scaled(mode=Mode.SPAWN))
    assert got.status == Status.NOT_APPLICABLE and "(mp.spawn)" in got.why
    got = judge(optimizer.LR_NOT_SCALED, scaled(ranks=(0,)))
    assert got.status == Status.NOT_APPLICABLE and got.why == "one rank"
