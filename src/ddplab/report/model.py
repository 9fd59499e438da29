"""The chapter's cost model, calibrated on what this report measured (an adapter: the chapter's
``calibration.Calibration`` fits its link at 2 ranks and measures 1 and 2 ranks in its own
runs; under torchrun only the launched world size can run, so the link is fitted at it)."""

from __future__ import annotations

import dataclasses

from ddplab.chapters.time_cost import cost_model, latency_fit


@dataclasses.dataclass
class Calibrated:
    params: int
    world_size: int
    batch_size: int
    fit: latency_fit.LatencyBandwidthFit | None = None  # every rank's all-reduce; None at W=1
    copy_bandwidth: float | None = None
    seconds_per_sample: float | None = None  # forward and backward, every rank busy
    optimizer_s: float | None = None

    @property
    def link(self) -> cost_model.Link | None:
        if self.fit is None:
            return None
        return cost_model.link_from_fit(self.fit.alpha_s, self.fit.bandwidth, self.world_size,
                                        "measured here")

    def predict(self, ranks: int | None = None, batch_size: int | None = None,
                bucket_mb: float = 25.0, accumulation: int = 1) -> cost_model.Step:
        """The model's DDP step at ``ranks`` ranks (default: this run's), every link like the
        one measured."""
        ranks = ranks or self.world_size
        if ranks > 1 and self.link is None:
            raise ValueError("a prediction for several ranks needs the all-reduce fit")
        return cost_model.predict_step(
            self.params, batch_size or self.batch_size, self.seconds_per_sample,
            gpus_per_node=ranks, intra=self.link, bucket_mb=bucket_mb,
            accumulation=accumulation, optimizer_s=self.optimizer_s,
            copy_bandwidth=self.copy_bandwidth)
