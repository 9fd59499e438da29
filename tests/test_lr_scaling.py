"""The learning-rate chapter's experiments against training this test does itself, in one
process."""

import io
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from conftest import ddplab_cli, ddplab_json  # noqa: E402
from ddplab.chapters.lr_scaling import (  # noqa: E402
    critical_batch,
    lr_scaling,
    lr_sweeps,
    noise_scale,
    plots,  # noqa: E402
    regression,
)
from ddplab.chapters.lr_scaling import summed as summed_check  # noqa: E402
from ddplab.screen import widgets  # noqa: E402


def one_process(global_batch, lrs, optimizer="sgd", seed=0, steps=None):
    """Plain torch, no DDP: train on whole global batches of the stream with the rates ``lrs``.
    Returns the per-step losses and the models' parameters before each step."""
    model = regression.make_regression_model()
    make = torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam
    opt = make(model.parameters(), lr=lrs[0])
    losses, params = [], []
    for t in range(steps or len(lrs)):
        X, y = regression.global_batch(seed, t, global_batch)
        params.append(torch.cat([p.detach().flatten() for p in model.parameters()]).clone())
        loss = ((model(X) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        losses.append(loss.item())
        for group in opt.param_groups:
            group["lr"] = lrs[t]
        opt.step()
    return np.array(losses), params


def goyal_schedule(lr, factor, warmup, steps):
    """Section 2.2's gradual warmup, written out independently: from lr, a constant increment
    per step, reaching factor * lr after ``warmup`` steps."""
    out = []
    for t in range(steps):
        out.append(lr + t * (factor * lr - lr) / warmup if t < warmup else factor * lr)
    return np.array(out)


# ---------------------------------------------------------------- the same global batch: 1x


@pytest.mark.parametrize("optimizer, lr", [("sgd", 0.15), ("adam", 0.05)])
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_a_global_batch_split_over_ranks_trains_like_one_process(world_size, optimizer, lr):
    steps, G = 25, 24
    reference, _ = one_process(G, [lr] * steps, optimizer, seed=3)
    result = lr_scaling.run(world_size=world_size, batch_size=G // world_size, lr=lr,
                            rule="none", optimizer=optimizer, steps=steps, seed=3)
    assert result.global_batch_size == G and len(result.losses) == steps
    np.testing.assert_allclose(result.losses, reference, rtol=1e-5, atol=1e-6)
    # The comparison bites: a different stream, or a smaller global batch, trains differently.
    other, _ = one_process(G, [lr] * steps, optimizer, seed=4)
    smaller, _ = one_process(G // 2, [lr] * steps, optimizer, seed=3)
    assert np.abs(other - reference).max() > 1e-2 and np.abs(smaller - reference).max() > 1e-2


def test_the_expected_loss_is_exact_for_the_task():
    X, y = regression.global_batch(77, 0, 400_000)
    values = []
    for shift in (0.0, 0.3):
        model = regression.make_regression_model()
        with torch.no_grad():
            model.weight.add_(torch.linspace(-shift, shift, regression.FEATURES))
            model.bias.add_(shift)
            monte_carlo = float(((model(X) - y) ** 2).mean())
        assert regression.population_loss(model) == pytest.approx(monte_carlo, rel=0.01)
        values.append(monte_carlo)
    assert abs(values[0] - values[1]) > 0.05  # the check tells the two models apart


# ---------------------------------------------------------------- rules and warmup


@pytest.mark.parametrize("rule, factor", [("none", lambda k: 1), ("linear", lambda k: k),
                                          ("sqrt", math.sqrt)])
@pytest.mark.parametrize("world_size, warmup", [(2, 0), (4, 5), (3, 7)])
def test_the_schedule_is_goyal_warmup_to_the_rules_rate_and_is_applied(rule, factor,
                                                                       world_size, warmup):
    steps, lr, b = 12, 0.05, 3
    expected = goyal_schedule(lr, factor(world_size), max(warmup, 1), steps) if warmup \
        else np.full(steps, lr * factor(world_size))
    result = lr_scaling.run(world_size=world_size, batch_size=b, lr=lr, rule=rule,
                            warmup_steps=warmup, steps=steps, seed=1)
    np.testing.assert_allclose(result.lrs, expected, rtol=0, atol=1e-12)
    assert result.peak_lr == pytest.approx(lr * factor(world_size))
    # Each step really used its rate: one process with the same rates follows the same path.
    reference, _ = one_process(world_size * b, list(expected), seed=1)
    np.testing.assert_allclose(result.losses, reference, rtol=1e-5, atol=1e-6)


def test_a_gradient_summed_over_ranks_is_the_linear_rule_and_diverges_where_it_does():
    summed = lr_scaling.run(world_size=8, batch_size=4, lr=0.15, rule="none",
                            gradients="sum", steps=40)
    linear = lr_scaling.run(world_size=8, batch_size=4, lr=0.15, rule="linear", steps=40)
    averaged = lr_scaling.run(world_size=8, batch_size=4, lr=0.15, rule="none", steps=40)
    assert summed.diverged and linear.diverged and not averaged.diverged
    assert summed.diverged_at == linear.diverged_at
    n = summed.diverged_at
    np.testing.assert_allclose(summed.losses[:n], linear.losses[:n], rtol=1e-5)
    assert np.abs(summed.losses[1:n] - averaged.losses[1:n]).max() > 0.1
    # the page's check says the same: the same path, and a run that is not on it is seen
    at_8 = lr_sweeps.GrowingBatch({8: [averaged]})
    assert summed_check.SummedCheck(at_8, summed, linear).largest_difference < 1e-5
    assert summed_check.SummedCheck(at_8, summed, averaged).largest_difference > 0.1


def test_divergence_stops_every_rank_at_the_same_step():
    too_large = lr_scaling.run(world_size=3, batch_size=4, lr=3.0, rule="none", steps=50)
    assert too_large.diverged and 0 < too_large.diverged_at < 50
    assert len(too_large.losses) == too_large.diverged_at + 1
    assert too_large.losses[-1] > lr_scaling.DIVERGES_ABOVE * regression.start_loss()
    assert np.isfinite(too_large.losses[:-1]).all()
    fine = lr_scaling.run(world_size=3, batch_size=4, lr=0.05, rule="none", steps=50)
    assert not fine.diverged and len(fine.losses) == 50
    # where a sweep stops working: 2 ranks trained, 3 diverged (by hand from the two runs)
    alone = lr_scaling.run(world_size=2, batch_size=4, lr=0.05, rule="none", steps=5)
    limit = lr_sweeps.GrowingBatch({2: [alone], 3: [too_large]}).limit()
    assert (limit.held, limit.held_batch, limit.broke, limit.broke_batch) == (2, 8, 3, 12)
    assert limit.broke_lr == 3.0 and (limit.broke_seeds, limit.seeds) == (1, 1)
    assert limit.figures("x")["x_broke_batch"] == 12


# ---------------------------------------------------------------- the noise scale


def per_sample_statistics(params, n=300_000, seed=5):
    """Monte Carlo |G|^2 and tr(Sigma) of one sample's gradient at ``params`` (plain torch)."""
    model = regression.make_regression_model()
    with torch.no_grad():
        model.weight.copy_(params[:-1].reshape(1, -1))
        model.bias.copy_(params[-1:])
        X, y = regression.global_batch(seed, 0, n)
        r = (model(X) - y).squeeze(1).double()
        g = torch.cat([2 * r[:, None] * X.double(), 2 * r[:, None]], dim=1)
    mean = g.mean(0)
    return float(mean @ mean), float(((g - mean) ** 2).sum(1).mean())


def test_the_hook_records_each_ranks_gradient_and_ddps_average():
    W, b, steps, lr = 3, 5, 4, 0.1
    result = noise_scale.run(world_size=W, batch_size=b, lr=lr, steps=steps, seed=2)
    _, params = one_process(W * b, [lr] * steps, seed=2)
    for t in range(steps):
        model = regression.make_regression_model()
        with torch.no_grad():
            model.weight.copy_(params[t][:-1].reshape(1, -1))
            model.bias.copy_(params[t][-1:])
        X, y = regression.global_batch(2, t, W * b)
        grads = []
        for r in range(W):
            model.zero_grad()
            ((model(X[r * b:(r + 1) * b]) - y[r * b:(r + 1) * b]) ** 2).mean().backward()
            grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        for r in range(W):
            assert result.small_sq[r, t] == pytest.approx(float(grads[r] @ grads[r]), rel=1e-5)
        average = torch.stack(grads).mean(0)
        assert result.big_sq[t] == pytest.approx(float(average @ average), rel=1e-5)
    assert np.ptp(result.small_sq[:, 0]) > 0.1  # the ranks' gradients really differ


def test_the_true_values_are_those_of_per_sample_gradients():
    for shift in (0.0, 0.4):
        model = regression.make_regression_model()
        with torch.no_grad():
            model.weight.add_(shift)
        params = torch.cat([p.detach().flatten() for p in model.parameters()])
        g2, trace = per_sample_statistics(params)
        exact_g2, exact_trace = noise_scale.exact(model)
        assert exact_g2 == pytest.approx(g2, rel=0.02)
        assert exact_trace == pytest.approx(trace, rel=0.02)


def test_the_estimators_recover_norms_that_follow_the_model():
    g2, trace, b_small, b_big = 2.5, 40.0, 4, 32
    small, big = g2 + trace / b_small, g2 + trace / b_big  # E|G_B|^2 = |G|^2 + tr(Sigma)/B
    assert noise_scale.g2_estimate(small, big, b_small, b_big) == pytest.approx(g2)
    assert noise_scale.trace_estimate(small, big, b_small, b_big) == pytest.approx(trace)


def test_ddps_estimates_average_to_the_true_values():
    runs = [noise_scale.run(world_size=4, batch_size=2, lr=0.1, steps=1, seed=s, target=None)
            for s in range(60)]
    g2 = np.mean([r.g2[0] for r in runs])
    trace = np.mean([r.trace[0] for r in runs])
    true_g2, true_trace = per_sample_statistics(torch.zeros(regression.FEATURES + 1))
    assert g2 == pytest.approx(true_g2, rel=0.25)
    assert trace == pytest.approx(true_trace, rel=0.15)
    assert runs[0].exact_g2[0] == pytest.approx(true_g2, rel=0.02)
    _, _, b_simple = noise_scale.pooled(runs)
    assert b_simple == pytest.approx(true_trace / true_g2, rel=0.3)


# ---------------------------------------------------------------- sweeps


def test_compare_runs_every_world_size_and_reports_progress():
    calls = []
    result = lr_sweeps.compare(largest_world_size=6, batch_size=2, lr=0.1, rule="sqrt", steps=5,
                               seeds=(0, 1), progress=lambda *a: calls.append(a))
    assert result.world_sizes == [1, 2, 4, 6]
    assert [c[:2] for c in calls] == [(i, 8) for i in range(9)]
    single = lr_scaling.run(world_size=4, batch_size=2, lr=0.1, rule="sqrt", steps=5, seed=1)
    np.testing.assert_array_equal(result.runs[4][1].losses, single.losses)
    np.testing.assert_allclose(result.losses(4), np.mean(
        [r.population_losses for r in result.runs[4]], axis=0))


def test_divergence_finds_the_first_diverging_rate():
    result = lr_sweeps.divergence(world_sizes=(1, 2), batch_size=4, lrs=(3.0, 0.05, 0.2),
                                  steps=30)
    assert result.lrs == [0.05, 0.2, 3.0]
    for k in (1, 2):
        assert result.diverged[k] == [False, False, True]
        assert result.smallest_diverging(k) == 3.0 and result.largest_stable(k) == 0.2


def test_steps_to_target_finds_the_best_rate_of_a_brute_force_search():
    lrs, seeds, target = (0.05, 0.2, 0.6, 4.0), (0, 1, 2), 0.6
    result = critical_batch.run(world_size=2, batch_sizes=(1, 8), lrs=lrs, seeds=seeds,
                                      target=target, max_steps=150)
    for i, G in enumerate(result.global_batch_sizes):
        medians = []
        for lr in lrs:
            counts = []
            for seed in seeds:
                model = regression.make_regression_model()
                opt = torch.optim.SGD(model.parameters(), lr=lr)
                count = math.inf
                for t in range(150):
                    X, y = regression.global_batch(seed, t, G)
                    opt.zero_grad()
                    ((model(X) - y) ** 2).mean().backward()
                    opt.step()
                    loss = regression.population_loss(model)
                    if loss <= target:
                        count = t + 1
                        break
                    if not loss < 1e3:
                        break
                counts.append(count)
            medians.append(np.median(counts))
        assert result.best_steps[i] == min(medians)
        assert result.best_lrs[i] == lrs[int(np.argmin(medians))]
    assert result.best_steps[0] > result.best_steps[1]


def test_the_fit_recovers_a_known_tradeoff():
    B = [2, 4, 8, 16, 64]
    fake = critical_batch.CriticalBatch(2, B, [0.1], [0], 0.5, 100,
                                   np.array([[[5 * (1 + 30 / b)]] for b in B]))
    s_min, b_crit = fake.fit()
    assert s_min == pytest.approx(5) and b_crit == pytest.approx(30)
    # what the figure draws, by hand: 5 (1 + 30/10) = 20 steps; 5 x 30 / 10 = 15 with halving
    assert fake.fitted_steps([10, 30]) == pytest.approx([20, 10])
    assert fake.halving_steps([10]) == pytest.approx([15])
    assert list(fake.batch_grid(3)) == pytest.approx([2, (2 * 64) ** 0.5, 64])  # geometric
    np.testing.assert_allclose(fake.linear_rule_lrs, [0.1, 0.2, 0.4, 0.8, 3.2])


def test_sweep_figures_draw_what_the_results_hold():
    same = lr_sweeps.same_global_batch(global_batch_size=8, world_sizes=(1, 2), steps=4)
    assert same.max_diff < 1e-5
    top = plots.same_batch({"SGD": same}).axes[0]
    np.testing.assert_array_equal(top.lines[0].get_ydata(), same.reference)
    for line, run in zip(top.lines[1:], same.runs.values()):
        np.testing.assert_array_equal(line.get_ydata(), run.losses)

    comparison = lr_sweeps.compare(largest_world_size=2, steps=4, target=0.45)
    by_step = plots.curves(comparison).axes[1]
    levels = {float(line.get_ydata()[0]) for line in by_step.lines
              if len(line.get_ydata()) == 2 and line.get_ydata()[0] == line.get_ydata()[1]}
    assert levels == {0.45, comparison.noise_floor} and comparison.noise_floor == 0.25

    div = lr_sweeps.divergence(world_sizes=(1, 2), lrs=(0.1, 3.0), steps=20, base_lr=0.15)
    lines = plots.divergence(div).axes[0].lines
    drawn = {line.get_label(): list(line.get_ydata()) for line in lines}
    assert drawn["rule 'linear' from lr 0.15"] == pytest.approx([0.15, 0.3])
    assert drawn["rule 'sqrt' from lr 0.15"] == pytest.approx([0.15, 0.15 * 2 ** 0.5])


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs, match", [
    ({"rule": "cubic"}, "rule must be one of"),
    ({"optimizer": "lamb"}, "optimizer must be one of"),
    ({"lr": 0}, "lr must be a positive number"),
    ({"lr": -0.1}, "lr must be a positive number"),
    ({"lr": float("nan")}, "lr must be a positive number"),
    ({"steps": 0}, "steps must be a positive int"),
    ({"warmup_steps": -1}, "warmup_steps must be an int >= 0"),
    ({"batch_size": 0}, "batch_size must be a positive int"),
    ({"gradients": "max"}, "gradients must be one of"),
])
def test_bad_input_is_a_clear_error_before_any_rank_runs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        lr_scaling.run(**kwargs)
    with pytest.raises(ValueError, match=match):
        lr_scaling.check(**kwargs)
    if "gradients" not in kwargs:
        with pytest.raises(ValueError, match=match):
            lr_sweeps.compare(**kwargs)


@pytest.mark.parametrize("call, match", [
    (lambda: noise_scale.run(world_size=1), "world_size must be an int >= 2"),
    (lambda: noise_scale.run(lr=0), "lr must be a positive number"),
    (lambda: lr_sweeps.compare(largest_world_size=0), "largest_world_size must be a positive int"),
    (lambda: lr_sweeps.same_global_batch(global_batch_size=10, world_sizes=(4,)),
     "does not split evenly"),
    (lambda: lr_sweeps.divergence(lrs=(0.1, -1.0)), "lr must be a positive number"),
    (lambda: critical_batch.run(batch_sizes=(0,)), "batch_size must be a positive int"),
])
def test_bad_sweep_input_is_a_clear_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- the lab's panel


def test_a_sweep_panel_shows_progress_and_reruns_on_change():
    # From 2 steps: after 1 step the per-sample panel has no point on its log axis, an error
    # the panel shows in its status line.
    panel = widgets.explore_sweep(lr_sweeps.compare, plots.curves, largest_world_size=(1, 8),
                                  steps=(2, 10))
    (bar, label), controls = panel.children[0].children, panel.children[1]
    world_size, steps = controls.children[0].children
    assert (world_size.value, steps.value) == (8, 2)  # compare's 60 steps lie outside: 2
    assert bar.value == bar.max == 4 and "done" in label.value
    world_size.value = 2
    assert bar.value == bar.max == 2
    assert "real DDP run and drawn in" in controls.children[1].value


# ---------------------------------------------------------------- CLI


def test_cli_lr_scaling_prints_the_losses_and_rates_of_every_step():
    data = ddplab_json("lr-scaling", "--world-size", "2", "--batch-size", "3", "--lr", "0.05",
               "--rule", "sqrt", "--optimizer", "adam", "--warmup-steps", "4", "--steps", "9",
               "--seed", "2")
    assert (data["world_size"], data["global_batch_size"], data["rule"]) == (2, 6, "sqrt")
    np.testing.assert_allclose(data["lrs"], goyal_schedule(0.05, math.sqrt(2), 4, 9))
    reference, _ = one_process(6, data["lrs"], "adam", seed=2)
    np.testing.assert_allclose(data["losses"], reference, rtol=1e-5, atol=1e-6)


def test_cli_noise_scale_prints_b_simple_and_its_two_quantities():
    data = ddplab_json("noise-scale", "--world-size", "4", "--batch-size", "2", "--steps", "5",
               "--target", "0")
    assert data["window_steps"] == 5 and (data["b_small"], data["b_big"]) == (2, 8)
    assert data["b_simple"] == pytest.approx(data["trace_sigma"] / data["g2"])
    small, big = np.mean(data["small_sq"], axis=0), np.array(data["big_sq"])
    assert data["g2"] == pytest.approx(float(np.mean((8 * big - 2 * small) / 6)))


@pytest.mark.parametrize("args, match", [(["--rule", "cubic"], "invalid choice"),
                                         (["--lr", "0"], "lr must be a positive number"),
                                         (["--warmup-steps", "-2"], "warmup_steps must be")])
def test_cli_bad_input_is_a_usage_error(args, match):
    done = ddplab_cli("lr-scaling", *args)
    assert done.returncode == 2 and match in done.stderr and "Traceback" not in done.stderr


def test_torchrun_gives_the_local_pools_run():
    args = ("--batch-size", "4", "--lr", "0.15", "--rule", "linear", "--steps", "6")
    local = ddplab_json("lr-scaling", "--world-size", "2", *args)
    launched = ddplab_json("lr-scaling", *args, torchrun=2)
    assert launched["world_size"] == 2 and launched["lrs"] == local["lrs"]
    np.testing.assert_allclose(launched["losses"], local["losses"], rtol=1e-6)


def test_a_sweep_passes_the_runs_done_so_far_so_a_panel_fills_in():
    seen = []

    def progress(done, total, label, partial=None):
        seen.append(None if partial is None else partial.world_sizes)

    final = lr_sweeps.compare(largest_world_size=4, steps=5, seeds=(0,), progress=progress)
    assert seen == [None, [1], [1, 2], None]  # before each run, then "done"
    assert final.world_sizes == [1, 2, 4]


# ---------------------------------------------------------------- the lab's figures, in place


def partials_and_final(**kwargs):
    """A sweep's partial results, as its progress hears of them, then its result."""
    partials = []

    def progress(done, total, label, partial=None):
        if partial is not None:
            partials.append(partial)

    final = lr_sweeps.compare(progress=progress, **kwargs)
    return [*partials, final]


def same_pixels_as_a_new_figure(live, result, plot) -> bool:
    """Whether ``live``'s PNG of ``result`` is, pixel for pixel, a new figure of it drawn under
    the kept figure's layout (what a new figure would show, less laying it out again)."""
    from ddplab.screen import live_figure

    updated = np.asarray(Image.open(io.BytesIO(live.png(result))))
    fresh = plot(result)
    fresh.set_layout_engine("none")
    live_figure._set_layout(fresh, live_figure._layout(live.figure))
    fresh.canvas.draw()
    same = np.array_equal(updated, np.asarray(fresh.canvas.buffer_rgba()))
    plt.close(fresh)
    return same


def test_a_partial_sweep_names_the_world_sizes_still_to_run():
    first, second, final = partials_and_final(largest_world_size=4, steps=4)
    assert (first.world_sizes, first.pending) == ([1], (2, 4))
    assert (second.world_sizes, second.pending) == ([1, 2], (4,))
    assert (final.world_sizes, final.pending) == ([1, 2, 4], ())
    legend = plots.curves(first).axes[1].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["1 rank", "2 ranks", "4 ranks"]
    by_step = {line.get_gid(): line for line in plots.curves(first).axes[1].lines}
    np.testing.assert_array_equal(by_step["step 0"].get_ydata(),
                                  np.minimum(first.losses(1), plots.LOSS_LIMITS[1] * 0.97))
    assert len(by_step["step 1"].get_xdata()) == len(by_step["step 2"].get_xdata()) == 0
    plt.close("all")


def test_a_sweep_fills_one_kept_figure_in_pixel_for_pixel():
    from ddplab.screen.live_figure import LiveFigure

    live = LiveFigure(plots.curves)
    live.png(lr_sweeps.compare(largest_world_size=4, steps=6, target=0.45))
    kept = live.figure
    # lr 0.4, linear: 4 ranks at 1.6 diverge (a cross); then 1, 2, 3 ranks: the legend renamed.
    moves = [partials_and_final(largest_world_size=4, steps=6, lr=0.4, target=0.45),
             partials_and_final(largest_world_size=3, steps=6, lr=0.05, rule="sqrt",
                                optimizer="adam", warmup_steps=2, target=0.45)]
    assert moves[0][-1].diverged(4) and not moves[1][-1].diverged(3)
    for results in moves:
        for result in results:
            assert same_pixels_as_a_new_figure(live, result, plots.curves), result.world_sizes
            assert live.figure is kept
    assert [t.get_text() for t in kept.axes[1].get_legend().get_texts()] == \
        ["1 rank", "2 ranks", "3 ranks"]
    # Another number of world sizes, or no target line: another figure.
    assert not plots.update_curves(kept, lr_sweeps.compare(largest_world_size=2, steps=3))
    assert not plots.update_curves(kept, lr_sweeps.compare(largest_world_size=3, steps=3))
    plt.close("all")


def test_the_noise_scale_figure_updates_in_place_pixel_for_pixel():
    from ddplab.screen.live_figure import LiveFigure

    live = LiveFigure(plots.noise_scale)
    live.png(noise_scale.run(world_size=4, steps=12))
    kept = live.figure
    for change in [{"world_size": 2, "lr": 0.05}, {"batch_size": 16, "lr": 0.4},
                   {"target": None}]:
        result = noise_scale.run(**{"world_size": 4, "steps": 12, **change})
        assert same_pixels_as_a_new_figure(live, result, plots.noise_scale), change
        assert live.figure is kept
    plt.close("all")
