"""Figures for the chapter "Learning rate and batch size": results in, matplotlib figures out.

``sweeps`` draws the learning-rate sweeps, ``noise`` the gradient noise scale and the critical
batch, ``axes`` holds what both share. A package named ``plots``, so that the forkserver's
preload leaves it out as it does every chapter's plots (``ddplab.chapters.experiment_modules``).
"""

from ddplab.chapters.lr_scaling.plots.axes import LOG_FLOOR, LOSS_LIMITS, WORLD_COLORS, world_color
from ddplab.chapters.lr_scaling.plots.noise import (
    critical_batch,
    noise_estimates,
    noise_scale,
    update_noise_scale,
)
from ddplab.chapters.lr_scaling.plots.sweeps import (
    curves,
    curves_grid,
    divergence,
    same_batch,
    schedules,
    summed,
    update_curves,
)

__all__ = ["LOG_FLOOR", "LOSS_LIMITS", "WORLD_COLORS", "critical_batch", "curves", "curves_grid",
           "divergence", "noise_estimates", "noise_scale", "same_batch", "schedules", "summed",
           "update_curves", "update_noise_scale", "world_color"]
