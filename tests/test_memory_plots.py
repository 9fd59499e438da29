"""The memory panel's one y-axis: the largest bytes any rank holds by either count, so that
DDP's and FSDP's bars are drawn to one scale."""

from types import SimpleNamespace

import matplotlib

from ddplab.chapters.memory import plots

matplotlib.use("Agg")


def test_the_top_is_the_largest_of_both_counts_over_every_run():
    runs = [SimpleNamespace(total_per_rank=[100, 120], measured_bytes_per_rank=[110, 125]),
            SimpleNamespace(total_per_rank=[300], measured_bytes_per_rank=[None])]
    assert plots.top_of(runs) == 300
    assert plots.top_of(runs[:1]) == 125  # malloc's count above the tensors'
