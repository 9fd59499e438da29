"""The cost model's arithmetic against cases worked out by hand, and against brute force.

No process group here: ``cost_model`` is arithmetic. The hand cases:

- a ring of 4 ranks, 1 MB, alpha 10 us, 1 GB/s: 2*3*10 us + 2*3/4 * 1 ms = 60 us + 1.5 ms;
- 2 nodes x 4 GPUs: 14 ring steps, 2 of them over the network, the rest over NVLink;
- 4 buckets of 1 s behind a backward of 8 s: the last bucket is full at 8 s, the queue is empty
  by then (buckets done at 3, 5, 7), so 1 s is exposed; of 3 s behind 4 s: done at 4, 7, 10,
  13, so 9 s are exposed.
"""

import math

import numpy as np
import pytest

from ddplab.chapters.time_cost import (
    bucket_size,
    calibration,
    cluster_prediction,
    cost_model,
    latency_fit,
    utilisation,
)
from ddplab.common import gpu_record

NVLINK = cost_model.INTRA_NODE["NVLink 4 (H100)"]
IB = cost_model.INTER_NODE["8 x 400 Gb/s per node (EFA v4 measured)"]
ETH = cost_model.INTER_NODE["Ethernet, 100 Gb/s per node"]


def test_ring_allreduce_by_hand():
    assert cost_model.ring_allreduce_seconds(1e6, 4, 10e-6, 1e9) == pytest.approx(1.56e-3)
    assert cost_model.ring_allreduce_seconds(1e6, 2, 10e-6, 1e9) == pytest.approx(20e-6 + 1e-3)
    assert cost_model.ring_allreduce_seconds(1e9, 1, 1.0, 1.0) == 0.0


def test_a_ring_over_nodes_pays_network_steps_and_the_slowest_link():
    S = 1e9
    t = cost_model.allreduce_seconds(S, gpus_per_node=4, nodes=2, intra=NVLINK, inter=ETH)
    expected = (cost_model.BASE_LATENCY_S + 12 * NVLINK.alpha_s + 2 * ETH.alpha_s
                + 2 * 7 / 8 * S / ETH.bandwidth)
    assert t == pytest.approx(expected)
    # One GPU per node: every step crosses the network; one node: none does.
    t = cost_model.allreduce_seconds(S, 1, 4, NVLINK, ETH)
    assert t == pytest.approx(6 * ETH.alpha_s + 1.5 * S / ETH.bandwidth)
    t = cost_model.allreduce_seconds(S, 8, 1, NVLINK, None)
    assert t == pytest.approx(8.4e-6 + 14 * 3.4e-6 + 1.75 * S / (18 * 20.6e9))
    with pytest.raises(ValueError, match="inter-node link"):
        cost_model.allreduce_seconds(S, 8, 2, NVLINK, None)


def test_the_fit_recovers_exact_constants_and_matches_numpy():
    sizes = [4096 * 4 ** i for i in range(8)]
    alpha, B = 150e-6, 1.2e9
    fit = latency_fit.fit_latency_bandwidth(sizes, [alpha + s / B for s in sizes])
    assert fit[:2] == pytest.approx((alpha, B), rel=1e-9) and fit.supported
    rng = np.random.default_rng(0)
    seconds = [(alpha + s / B) * rng.uniform(0.7, 1.4) for s in sizes]
    A = np.array([[1 / t, s / t] for s, t in zip(sizes, seconds)])
    (a, inv_b), *_ = np.linalg.lstsq(A, np.ones(len(sizes)), rcond=None)
    assert a > 0 and inv_b > 0  # so the constrained fit is the unconstrained one
    fit = latency_fit.fit_latency_bandwidth(sizes, seconds)
    assert fit[:2] == pytest.approx((a, 1 / inv_b)) and fit.supported and fit.note == ""


def test_noisy_times_give_no_negative_latency_and_say_the_fit_is_unsupported():
    """Times seen on a loaded machine: 4 KiB in 280 us, 256 KiB in 264 us. Unconstrained,
    the line through them falls (1/B < 0). Held at 1/B = 0, the relative least squares of a
    constant is sum(1/t) / sum(1/t^2) = (1/280 + 1/264) / (1/280^2 + 1/264^2) us = 271.5 us;
    the other boundary, alpha = 0, cannot fit two times that fall with size."""
    sizes, seconds = [4096, 262144], [280e-6, 264e-6]
    A = np.array([[1 / t, s / t] for s, t in zip(sizes, seconds)])
    assert np.linalg.solve(A, np.ones(2))[1] < 0  # the unconstrained fit is infeasible
    fit = latency_fit.fit_latency_bandwidth(sizes, seconds)
    assert fit.alpha_s == pytest.approx(271.5e-6, abs=0.05e-6)
    assert fit.bandwidth == math.inf and not fit.supported
    assert "1/B held at 0" in fit.note


def test_a_negative_latency_is_held_at_zero():
    """Times of a pure bandwidth 1 GB/s, with the small sizes measured fast: unconstrained
    alpha < 0. With alpha = 0 the fit of 1/B alone is sum(S/t) / sum((S/t)^2), checked
    against a brute-force scan of the same relative residual."""
    sizes = [1e6, 4e6, 16e6]
    seconds = [0.8e-3, 3.9e-3, 16.2e-3]
    A = np.array([[1 / t, s / t] for s, t in zip(sizes, seconds)])
    (a, _), *_ = np.linalg.lstsq(A, np.ones(3), rcond=None)
    assert a < 0
    fit = latency_fit.fit_latency_bandwidth(sizes, seconds)
    assert fit.alpha_s == 0.0 and not fit.supported and "alpha held at 0" in fit.note
    grid = np.linspace(0.8e-9, 1.2e-9, 400001)  # candidate 1/B, s/byte
    r = ((np.outer(grid, sizes) - seconds) / seconds) ** 2
    assert 1 / fit.bandwidth == pytest.approx(grid[r.sum(axis=1).argmin()], rel=1e-5)


def test_a_fit_needs_two_sizes():
    with pytest.raises(ValueError, match="2 or more distinct sizes"):
        latency_fit.fit_latency_bandwidth([4096, 4096], [1e-4, 2e-4])
    with pytest.raises(ValueError, match="positive"):
        latency_fit.fit_latency_bandwidth([4096, 8192], [1e-4, 0.0])


def test_a_link_from_a_fit_gives_back_the_fitted_line():
    alpha, B, n = 200e-6, 0.9e9, 2
    link = cost_model.link_from_fit(alpha, B, n, "here")
    for S in (1e3, 1e6, 1e8):
        ring = cost_model.ring_allreduce_seconds(S, n, link.alpha_s, link.bandwidth)
        assert ring == pytest.approx(alpha + S / B)
    four = cost_model.link_from_fit(alpha, B, 4, "here")
    assert four.alpha_s == pytest.approx(alpha / 6)
    assert four.bandwidth == pytest.approx(B * 6 / 4)
    with pytest.raises(ValueError, match="at least 2 ranks"):
        cost_model.link_from_fit(alpha, B, 1, "here")


def simulated_exposed(bucket_s, buckets, backward_s):
    """Bucket i (1..n) is full at i/n of backward; all-reduces run one at a time."""
    done = 0.0
    for i in range(1, buckets + 1):
        done = max(done, i / buckets * backward_s) + bucket_s
    return done - backward_s


@pytest.mark.parametrize("bucket_s, buckets, backward_s, by_hand", [
    (1.0, 4, 8.0, 1.0), (3.0, 4, 4.0, 9.0), (2.0, 1, 5.0, 2.0)])
def test_exposed_communication_by_hand_and_by_simulation(bucket_s, buckets, backward_s,
                                                        by_hand):
    exposed = cost_model.exposed_seconds(bucket_s, buckets, backward_s)
    assert exposed == pytest.approx(by_hand)
    assert exposed == pytest.approx(simulated_exposed(bucket_s, buckets, backward_s))
    assert cost_model.exposed_seconds(bucket_s, buckets, backward_s, overlap=False) == \
        pytest.approx(buckets * bucket_s)


def test_exposed_communication_against_simulation_on_a_grid():
    for buckets in (1, 2, 3, 7, 50):
        for bucket_s in (0.01, 0.3, 1.0, 4.0):
            exposed = cost_model.exposed_seconds(bucket_s, buckets, 2.0)
            assert exposed == pytest.approx(simulated_exposed(bucket_s, buckets, 2.0))


def test_the_best_bucket_count_minimises_the_tradeoff():
    S, w, o = 16.8e6, 1e9, 150e-6
    best = bucket_size.best_bucket_count(S, w, o)
    assert best == pytest.approx(math.sqrt(S / (w * o)))
    grid = np.linspace(1, 100, 100_000)
    values = bucket_size.exposed_tradeoff(grid, S, w, o)
    assert grid[np.argmin(values)] == pytest.approx(best, rel=1e-3)
    assert bucket_size.exposed_tradeoff(best, S, w, o) == pytest.approx(2 * math.sqrt(S * o / w))
    model = bucket_size.tradeoff(S, w, o, max_buckets=32)
    assert model.best == best and model.buckets[0] == 1 and model.buckets[-1] == pytest.approx(32)
    lowest = model.buckets[int(np.argmin(model.exposed_s))]
    assert lowest == pytest.approx(best, rel=0.07)  # the grid's step is 6%
    assert model.best_is_a_minimum
    # by hand: S / w = 16.8 ms over one bucket, plus one call's 0.15 ms
    assert model.exposed(1) == pytest.approx(16.8e-3 + 150e-6)


def test_the_algorithm_bandwidth_of_a_ring_of_8_on_nvlink():
    # busbw 370.8 GB/s (NCCL topo.h, 18 x 20.6) -> algbw 370.8 * 8/14 = 211.9 GB/s
    w = bucket_size.algorithm_bandwidth(NVLINK.bandwidth, 8)
    assert w == pytest.approx(211.9e9, rel=1e-3)
    with pytest.raises(ValueError):
        bucket_size.algorithm_bandwidth(1e9, 1)


def test_a_measured_table_gives_small_messages_less_bandwidth():
    # stas00/ml-engineering network/README.md, 4 nodes of 8 B200: 64.43 GB/s at 16 MiB,
    # 91.19 at 32 MiB; between them in log-size; clamped outside the table.
    assert IB.bandwidth_at(16 * 2**20) == pytest.approx(64.43e9)
    assert IB.bandwidth_at(32 * 2**20) == pytest.approx(91.19e9)
    assert 64.43e9 < IB.bandwidth_at(25 * 2**20) < 91.19e9
    assert IB.bandwidth_at(1e12) == pytest.approx(381.80e9)
    assert IB.bandwidth_at(10) == pytest.approx(5.37e9)
    assert NVLINK.bandwidth_at(10) == NVLINK.bandwidth  # no table: one figure


def test_a_step_adds_its_parts():
    link = cost_model.Link("x", 1e-4, 1e9, "test")
    step = cost_model.predict_step(params=1e6, batch_size=10, seconds_per_sample=1e-3,
                                   gpus_per_node=2, intra=link, bucket_mb=1.0, overlap=False,
                                   optimizer_s=2e-3, memory_bandwidth=8e9)
    nbytes = 4e6
    buckets = math.ceil(nbytes / 2 ** 20)  # 4
    per_bucket = 2 * 1e-4 + nbytes / buckets / 1e9
    assert step.buckets == buckets == 4
    assert step.compute_s == pytest.approx(10e-3)
    # two copies of S bytes, each reading and writing S: 4 S at a datasheet's bandwidth
    assert step.copy_s == pytest.approx(4 * nbytes / 8e9)
    measured = cost_model.predict_step(1e6, 10, 1e-3, 2, intra=link, copy_bandwidth=4e9)
    assert measured.copy_s == pytest.approx(2 * nbytes / 4e9)
    assert step.exposed_s == pytest.approx(buckets * per_bucket)
    assert step.step_s == pytest.approx(10e-3 + 2e-3 + 2e-3 + buckets * per_bucket)
    assert step.samples == 20
    assert step.efficiency == pytest.approx(12e-3 / step.step_s)
    # Accumulation: k times the computation, still one all-reduce.
    acc = cost_model.predict_step(1e6, 10, 1e-3, 2, intra=link, bucket_mb=1.0,
                                  accumulation=4, overlap=False)
    assert acc.compute_s == pytest.approx(40e-3) and acc.comm_s == pytest.approx(step.comm_s)
    assert acc.efficiency > cost_model.predict_step(1e6, 10, 1e-3, 2, intra=link,
                                                    bucket_mb=1.0, overlap=False).efficiency


def test_compute_per_sample_is_six_flops_per_parameter_and_token():
    chip = cost_model.ACCELERATORS["H100 SXM"]
    t = cost_model.seconds_per_sample(1e9, chip, tokens_per_sample=2048, utilisation=0.5)
    assert t == pytest.approx(6 * 1e9 * 2048 / (989e12 * 0.5))


def test_cluster_predictions_fall_with_slower_networks_and_every_constant_has_a_source():
    effs = [cluster_prediction.run(1300, nodes=4, inter=name).step.efficiency
            for name in cost_model.INTER_NODE]
    assert effs == sorted(effs, reverse=True)  # the table is ordered fastest first
    p = cluster_prediction.run(1300, nodes=4)
    assert set(p.curves) == set(cost_model.INTER_NODE) and 4 in p.curves[p.inter]
    assert "MODEL" in p.describe()
    for table in (cost_model.INTRA_NODE, cost_model.INTER_NODE, cost_model.ACCELERATORS):
        assert all(len(item.source) > 20 for item in table.values())
    curves = cluster_prediction.scaling_curves(1.3e9, global_batch_size=64, batch_size=4,
                                               gpus=(8, 128))
    weak, strong = curves.values()
    assert set(weak) == {8, 128} and set(strong) == {8}  # 64 sequences cannot feed 128 GPUs


@pytest.mark.parametrize("kwargs, match", [
    (dict(params_millions=0), "params_millions"), (dict(nodes=0), "nodes"),
    (dict(inter="carrier pigeon"), "inter must be one of"),
    (dict(accumulation=1.5), "accumulation"), (dict(bucket_mb=-1), "bucket_mb")])
def test_bad_cluster_input_is_a_clear_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cluster_prediction.run(**kwargs)


def test_the_calibrated_prediction_is_the_model_with_the_measured_inputs():
    check = calibration.Calibration(
        params=1_000_000, batch_size=8, alpha_s=2e-4, bandwidth=1e9, copy_bandwidth=5e9,
        seconds_per_sample={1: 1e-3, 2: 2e-3}, optimizer_s={1: 3e-3, 2: 4e-3},
        measured_s={1: 0.02, 2: 0.06}, rounds=1)
    at2 = check.predict(2)
    assert at2.compute_s == pytest.approx(16e-3) and at2.optimizer_s == pytest.approx(4e-3)
    assert at2.comm_s == pytest.approx(2e-4 + 4e6 / 1e9)  # the fit itself at 2 ranks
    assert at2.copy_s == pytest.approx(8e6 / 5e9)
    assert check.predict(8).compute_s == pytest.approx(8e-3)  # measured at 1 rank
    # compute, copy, the one bucket's all-reduce (nothing to hide it behind), optimizer
    assert at2.step_s == pytest.approx(16e-3 + 1.6e-3 + 4.2e-3 + 4e-3)
    assert check.ratio(2) == pytest.approx(0.06 / 25.8e-3)  # 2.33: outside a factor of 2
    assert check.ratio(1) == pytest.approx(0.02 / (8e-3 + 1.6e-3 + 3e-3))  # 1.59: inside
    assert not check.agrees


# ---------------------------------------------------------------- utilisation from the record


GPT2_SMALL, GPT2_MEDIUM = 124_439_808, 354_823_168  # the records' 124 M and 355 M
H100 = "h100-2026-11-25"  # worked by hand from the H100 run's figures


def test_utilisation_is_the_records_at_its_sizes_clamped_above_extrapolated_below():
    """The H100 record: compiled 22.1% at 124 M, 28.9% at 355 M, 37.9% at 1.3 B;
    eager 9.8%, 13.0%, 21.0%. Below 124 M the rise from 124 M to 355 M goes on down as a power
    of the size: k = ln(28.9 / 22.1) / ln(354,823,168 / 124,439,808) = 0.26826 / 1.04780 =
    0.25603, and 10 M gets 22.1% x (10e6 / 124,439,808) ^ 0.25603 = 22.1% x e^(-2.52124 x
    0.25603) = 22.1% x 0.52440 = 11.59%, where clamping gave 22.1%."""
    record = "h100-2026-11-25"
    assert utilisation.from_record(GPT2_MEDIUM, record=record).value == pytest.approx(0.289)
    assert utilisation.from_record(GPT2_MEDIUM, compiled=False,
                                   record=record).value == pytest.approx(0.13)
    small = utilisation.from_record(10e6, record=record)
    assert small.value == pytest.approx(0.1159, abs=5e-5)
    assert "extrapolated" in small.source and "a model" in small.source
    big = utilisation.from_record(70e9, compiled=False, record=record)
    assert big.value == pytest.approx(0.21) and "clamped" in big.source
    assert "measured on one NVIDIA H100 80GB HBM3, 2026-11-25" in big.source


def test_without_a_name_the_newest_record_is_used_and_named():
    """The H200 record of 2026-11-28 is the newest: 124 M eager only, 16.8%; a mode it did not
    measure is a clear error naming the records, not an empty interpolation."""
    newest = gpu_record.load()
    assert newest.name == "h200-2026-11-28"
    u = utilisation.from_record(GPT2_MEDIUM, compiled=False)
    assert u.value == pytest.approx(0.168)
    assert "clamped to the record's 124 M" in u.source
    assert "measured on one NVIDIA H200, 2026-11-28" in u.source
    assert utilisation.describe_record().startswith(
        "model FLOPs utilisation, measured on one NVIDIA H200, 2026-11-28")
    with pytest.raises(ValueError, match="no compiled rows.*h200-2026-11-26"):
        utilisation.from_record(GPT2_MEDIUM)


def test_utilisation_is_interpolated_in_log_params():
    """Halfway in log(params) between 124 M and 355 M, the geometric mean of the two, lies
    halfway between their MFUs: (22.1 + 28.9) / 2 = 25.5% compiled, (9.8 + 13.0) / 2 = 11.4%
    eager. A quarter of the way from 355 M to 1.3 B (1,313,626,112) in log: 355 M x (1313.6 /
    354.8)^(1/4) = 492.2 M, at 28.9 + (37.9 - 28.9) / 4 = 31.15%. Linear in params instead
    would give 28.9 + 9 x 137.4 / 958.8 = 30.19% there."""
    middle = math.sqrt(GPT2_SMALL * GPT2_MEDIUM)
    assert utilisation.from_record(middle, record=H100).value == pytest.approx(0.255)
    assert utilisation.from_record(middle, compiled=False,
                                   record=H100).value == pytest.approx(0.114)
    quarter = GPT2_MEDIUM * (1_313_626_112 / GPT2_MEDIUM) ** 0.25
    u = utilisation.from_record(quarter, record=H100)
    assert u.value == pytest.approx(0.3115) and "interpolated" in u.source


def test_the_cluster_model_computes_at_the_records_utilisation_unless_the_reader_sets_one():
    chip = cost_model.ACCELERATORS["H100 SXM"]
    p = cluster_prediction.run(params_millions=124.439808, nodes=1, gpus_per_node=1,
                               batch_size=16, tokens_per_sample=1024)
    # one GPU alone, the H100 record's 124 M run (16 x 1024 tokens): the model computes for as
    # long as that record's step took, to the rounding of its MFU; the newest record (the
    # H200's) is another card's and is not used
    assert chip.record == H100 != gpu_record.load().name
    record = gpu_record.load(chip.record)
    assert record.data["peak_flops"] == chip.flops == 989e12
    step_ms = {r["mode"]: r["step_ms"] for r in record.rows if r["params"] == GPT2_SMALL}
    mfu = utilisation.from_record(GPT2_SMALL, record=H100).value
    assert p.utilisation.value == mfu == pytest.approx(0.221)
    assert p.step.compute_s == pytest.approx(6 * GPT2_SMALL * 16 * 1024 / (989e12 * mfu))
    assert p.step.compute_s == pytest.approx(step_ms["compiled"] / 1e3, rel=0.005)
    eager = cluster_prediction.run(124.439808, nodes=1, gpus_per_node=1, batch_size=16,
                                   tokens_per_sample=1024, compiled=False)
    assert eager.step.compute_s == pytest.approx(step_ms["eager"] / 1e3, rel=0.005)
    with pytest.raises(ValueError, match="no GPU record was measured on A100"):
        cluster_prediction.run(1300, accelerator="A100 SXM 80GB")
    a100 = cluster_prediction.run(1300, accelerator="A100 SXM 80GB", utilisation=0.3)
    assert a100.utilisation.value == 0.3
    mine = cluster_prediction.run(1300, nodes=4, utilisation=0.5)
    assert mine.utilisation.source == "MFU 50.0%, set by the reader"
    assert mine.step.compute_s == pytest.approx(
        cost_model.seconds_per_sample(1.3e9, chip, 2048, 0.5) * 4)
    assert "MFU" in cluster_prediction.run(1300, nodes=4).describe()
    with pytest.raises(ValueError, match="at most 1"):
        cluster_prediction.run(1300, utilisation=40)
    with pytest.raises(ValueError, match="compiled must be True or False"):
        cluster_prediction.run(1300, compiled="yes")


def test_the_models_sources_name_every_link_and_accelerator_with_its_source():
    text = " ".join(cost_model.sources().split())  # wrapped for a page: joined again
    for link in [*cost_model.INTRA_NODE.values(), *cost_model.INTER_NODE.values()]:
        assert f"{link.name}: alpha {1e6 * link.alpha_s:.1f} us" in text
        assert " ".join(link.source.split()) in text
    for chip in cost_model.ACCELERATORS.values():
        assert f"{chip.name}: {' '.join(chip.source.split())}" in text
    assert all(len(line) <= 78 for line in cost_model.sources().splitlines())


def test_utilisation_by_size_says_where_each_figure_comes_from():
    text = utilisation.describe_sizes((50e6, 1.3e9), record=H100)
    paragraphs = [" ".join(p.split()) for p in text.split("\n") if not p.startswith("    ")]
    assert [p.split(":")[0] for p in paragraphs] == ["50 M parameters", "1,300 M parameters"]
    source = utilisation.from_record(1.3e9, record=H100).source
    assert " ".join(source.split()) in " ".join(text.split())
