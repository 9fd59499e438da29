"""Figures for the chapter "The time cost": results in, matplotlib figures out.

``steps`` draws a step's phases and the scaling of measured steps, ``communication`` the
all-reduce, the hooks and the bucket trade-off, ``no_sync`` what accumulating with it saves and
does, ``model`` the cost model (its calibration and its cluster prediction). A package named
``plots``, so that the forkserver's preload leaves it out as it does every chapter's plots
(``ddplab.chapters.experiment_modules``).
"""

from ddplab.chapters.time_cost.plots.communication import (
    allreduce,
    bucket_tradeoff,
    compression,
    update_allreduce,
    update_compression,
)
from ddplab.chapters.time_cost.plots.model import (
    calibration,
    cluster,
    predicted_scaling,
    update_cluster,
)
from ddplab.chapters.time_cost.plots.no_sync import accumulated, accumulation
from ddplab.chapters.time_cost.plots.steps import scaling, step_phases

__all__ = ["accumulated", "accumulation", "allreduce", "bucket_tradeoff", "calibration",
           "cluster", "compression", "predicted_scaling", "scaling", "step_phases",
           "update_allreduce", "update_cluster", "update_compression"]
