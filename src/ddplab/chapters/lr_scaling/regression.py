"""The regression task of the learning-rate chapter: linear regression with label noise, on
fresh samples every step, with an expected loss computed exactly.

Features are independent normals with standard deviations from 1 down to 0.25, so the mean
squared error is a quadratic whose curvatures (twice each feature's variance) run from 2 down to
0.125: plain gradient descent on it is stable only below a learning rate of 2 / 2 = 1.0
(:func:`largest_curvature`), whatever the batch size.
"""

from __future__ import annotations

import math

import torch

FEATURES = 16
NOISE = 0.5  # standard deviation of the label noise
LOSS_FLOOR = NOISE ** 2  # the expected loss of the true weights: no model does better
TARGET = LOSS_FLOOR + 0.2  # steps and samples are counted to this expected loss
TEACHER_SEED = 1234


def feature_scales() -> torch.Tensor:
    """Standard deviations of the 16 features, 1 down to 0.25: curvatures 2 down to 0.125."""
    return torch.logspace(0.0, math.log10(0.25), FEATURES)


def teacher() -> tuple[torch.Tensor, float]:
    """The weights and bias that generate the labels (the same for every run)."""
    w = torch.randn(FEATURES, generator=torch.Generator().manual_seed(TEACHER_SEED))
    return w, 0.5


def global_batch(seed: int, step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch ``step`` of the stream ``seed``: ``size`` fresh samples, identical on every rank."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    X = torch.randn(size, FEATURES, generator=g) * feature_scales()
    w, b = teacher()
    y = X @ w + b + NOISE * torch.randn(size, generator=g)
    return X, y.unsqueeze(1)


def make_regression_model() -> torch.nn.Linear:
    """A linear model started at zero (no random initialisation to seed)."""
    model = torch.nn.Linear(FEATURES, 1)
    torch.nn.init.zeros_(model.weight)
    torch.nn.init.zeros_(model.bias)
    return model


def population_loss(model: torch.nn.Linear) -> float:
    """The model's expected loss over the whole stream, exactly (the
    features are independent normals): the sum over features of
    scale^2 (w - w*)^2, plus (b - b*)^2, plus NOISE^2."""
    w, b = teacher()
    with torch.no_grad():
        dw = model.weight.detach().cpu().flatten() - w
        db = float(model.bias.detach().cpu()) - b
        weights = float((feature_scales() ** 2 * dw ** 2).sum())
        return weights + db ** 2 + NOISE ** 2


def start_loss() -> float:
    return population_loss(make_regression_model())


def largest_curvature() -> float:
    """The largest eigenvalue of the expected loss's Hessian in the weights: 2 x the largest
    feature variance (the bias's curvature is 2 too). Gradient descent diverges above
    2 / largest_curvature() (the stability limit of a quadratic)."""
    return float(2 * (feature_scales() ** 2).max())


def estimated_curvature(samples: int = 100_000, seed: int = 0) -> float:
    """The same largest curvature estimated from data: the largest eigenvalue of the mean
    squared error's Hessian ``2 E[x x^T]`` over ``samples`` samples of the stream, with a 1
    appended to the features for the bias."""
    X, _ = global_batch(seed=seed, step=0, size=samples)
    inputs = torch.cat([X, torch.ones(len(X), 1)], dim=1)  # the bias sees a constant 1
    hessian = 2 * inputs.T @ inputs / len(inputs)
    return torch.linalg.eigvalsh(hessian).max().item()
