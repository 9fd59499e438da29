"""The cost model's predictions for clusters: every figure here is a MODEL's, not a measurement.

    from ddplab.chapters.time_cost import cluster_prediction
    print(cluster_prediction.run(params_millions=1300, nodes=4).describe())

``cost_model.predict_step`` for a model of N parameters, a sample of ``tokens_per_sample`` tokens
(6 FLOPs per parameter and token at a model FLOPs utilisation of the accelerator's peak: by
default the one measured for a model of that size, eager or compiled, on the accelerator's own
kind of card, from its GPU record (``utilisation.from_record``, ``Accelerator.record``); or
``utilisation=``, a fraction the reader sets), on nodes of GPUs joined by published links
(``cost_model.INTRA_NODE``, ``INTER_NODE``).
"""

from __future__ import annotations

import dataclasses

from ddplab.chapters.time_cost import cost_model
from ddplab.chapters.time_cost.utilisation import Utilisation, from_record, given
from ddplab.common.checks import one_of, positive_int, positive_number


@dataclasses.dataclass(frozen=True)
class ClusterPrediction:
    """The model's step on a cluster, and its weak scaling efficiency against the number of
    nodes for every inter-node link (``curves``: link name -> {nodes: efficiency})."""

    params: float
    gpus_per_node: int
    nodes: int
    intra: str
    inter: str
    accelerator: str
    batch_size: int
    tokens_per_sample: int
    utilisation: Utilisation
    step: cost_model.Step
    curves: dict

    @property
    def title(self) -> str:
        return (f"model: {self.params / 1e6:,.0f} M parameters, {self.accelerator}, "
                f"{self.batch_size} x {self.tokens_per_sample} tokens per GPU, "
                f"MFU {self.utilisation.value:.0%}, {self.intra}")

    def describe(self) -> str:
        s = self.step
        return (f"MODEL, not a measurement: {self.params / 1e6:,.0f} M parameters on "
                f"{self.nodes} node(s) x {self.gpus_per_node} {self.accelerator} ({self.intra}; "
                f"{self.inter}; compute at MFU {self.utilisation.value:.1%}): "
                f"step {1e3 * s.step_s:.1f} ms = compute {1e3 * s.compute_s:.1f} "
                f"+ copies {1e3 * s.copy_s:.1f} + exposed all-reduce {1e3 * s.exposed_s:.1f} "
                f"(of {1e3 * s.comm_s:.1f}, {s.buckets} buckets) + optimizer "
                f"{1e3 * s.optimizer_s:.1f}; {s.samples_per_s:,.0f} samples/s, efficiency "
                f"{s.efficiency:.0%}")


NODE_COUNTS = (1, 2, 4, 8, 16, 32, 64)


def run(params_millions: float = 1300, gpus_per_node: int = 8, nodes: int = 4,
        intra: str = "NVLink 4 (H100)", inter: str = "8 x 400 Gb/s per node (EFA v4 measured)",
        bucket_mb: float = 25.0, accumulation: int = 1, batch_size: int = 4,
        tokens_per_sample: int = 2048, accelerator: str = "H100 SXM",
        compiled: bool = True, utilisation: float | None = None) -> ClusterPrediction:
    """The model's step for a model of ``params_millions`` M parameters trained with DDP on
    ``nodes`` x ``gpus_per_node`` accelerators; a sample is ``tokens_per_sample`` tokens.
    The computation runs at ``utilisation`` of peak if given, else at the MFU the
    accelerator's GPU record measured for this size (``compiled``: under ``torch.compile``,
    else eager)."""
    positive_number("params_millions", params_millions)
    for name, value in (("gpus_per_node", gpus_per_node), ("nodes", nodes),
                        ("accumulation", accumulation), ("batch_size", batch_size),
                        ("tokens_per_sample", tokens_per_sample)):
        positive_int(name, value)
    positive_number("bucket_mb", bucket_mb)
    one_of("intra", intra, list(cost_model.INTRA_NODE))
    one_of("inter", inter, list(cost_model.INTER_NODE))
    one_of("accelerator", accelerator, list(cost_model.ACCELERATORS))
    params = params_millions * 1e6
    chip = cost_model.ACCELERATORS[accelerator]
    mfu = _utilisation(params, compiled, utilisation, chip)
    per_sample = cost_model.seconds_per_sample(params, chip, tokens_per_sample, mfu.value)

    def step(n: int, link: str) -> cost_model.Step:
        return cost_model.predict_step(params, batch_size, per_sample, gpus_per_node, n,
                                       cost_model.INTRA_NODE[intra],
                                       cost_model.INTER_NODE[link], bucket_mb, accumulation,
                                       memory_bandwidth=chip.memory_bandwidth)

    curves = {link: {n: step(n, link).efficiency for n in sorted({*NODE_COUNTS, nodes})}
              for link in cost_model.INTER_NODE}
    return ClusterPrediction(params, gpus_per_node, nodes, intra, inter, accelerator,
                             batch_size, tokens_per_sample, mfu, step(nodes, inter), curves)


def _utilisation(params: float, compiled: bool, utilisation: float | None,
                 chip: cost_model.Accelerator) -> Utilisation:
    """The reader's ``utilisation``, else the MFU measured on ``chip``'s own kind of card (its
    ``record``): never another card's record."""
    if not isinstance(compiled, bool):
        raise ValueError(f"compiled must be True or False, got {compiled!r}")
    if utilisation is not None:
        return given(utilisation)
    if chip.record is None:
        raise ValueError(f"no GPU record was measured on {chip.name}: give utilisation=, a "
                         "fraction of its peak")
    return from_record(params, compiled, record=chip.record)


def scaling_curves(params: float, global_batch_size: int, batch_size: int,
                   gpus=(8, 16, 32, 64, 128, 256, 512), gpus_per_node: int = 8,
                   intra: str = "NVLink 4 (H100)",
                   inter: str = "8 x 400 Gb/s per node (EFA v4 measured)",
                   tokens_per_sample: int = 2048, accelerator: str = "H100 SXM",
                   compiled: bool = True, utilisation: float | None = None) -> dict:
    """Efficiency against the GPU count: ``weak`` keeps ``batch_size`` per GPU; ``strong``
    divides ``global_batch_size`` over the GPUs, ``batch_size`` at a time, accumulating the
    rest (one all-reduce per step either way); utilisation as in ``run``."""
    chip = cost_model.ACCELERATORS[accelerator]
    mfu = _utilisation(params, compiled, utilisation, chip).value
    per_sample = cost_model.seconds_per_sample(params, chip, tokens_per_sample, mfu)
    out = {f"weak: {batch_size} per GPU": {}, f"strong: {global_batch_size} in all": {}}
    weak, strong = out
    for n in gpus:
        nodes = max(1, n // gpus_per_node)
        per_node = min(n, gpus_per_node)
        common = dict(gpus_per_node=per_node, nodes=nodes, intra=cost_model.INTRA_NODE[intra],
                      inter=cost_model.INTER_NODE[inter], memory_bandwidth=chip.memory_bandwidth)
        out[weak][n] = cost_model.predict_step(params, batch_size, per_sample, **common).efficiency
        per_gpu = global_batch_size / n
        if per_gpu >= 1:
            micro = min(batch_size, int(per_gpu))
            out[strong][n] = cost_model.predict_step(params, micro, per_sample,
                                                  accumulation=max(1, round(per_gpu / micro)),
                                                  **common).efficiency
    return out


def describe_curves(curves: dict) -> str:
    """:func:`scaling_curves`'s efficiencies, a row per curve and a column per GPU count ("-"
    where a curve has no point: a global batch smaller than the GPU count)."""
    gpus = sorted({n for curve in curves.values() for n in curve})
    width = max(len(label) for label in ("model, efficiency at GPUs", *curves))
    lines = [f"{'model, efficiency at GPUs':<{width}}" + "".join(f"{n:>6}" for n in gpus)]
    lines += [f"{label:<{width}}" + "".join(f"{curve[n]:>6.0%}" if n in curve else f"{'-':>6}"
                                            for n in gpus) for label, curve in curves.items()]
    return "\n".join(lines)
