"""The small MLP several chapters train, and its data: ``nn.Linear`` layers of given widths,
float32 with bias, ReLU between them, on seeded Gaussian batches.

Parameters are named ``0.weight``, ``0.bias``, ``2.weight``, ... (the ReLUs take the odd
indices), so a bucket's parameter names read as layers.
"""

from __future__ import annotations

import torch

from ddplab.common.checks import positive_int

DEFAULT_LAYERS = (64, 1024, 1024, 10)  # 1.1 M parameters: 4.3 MB of float32 gradients


def make_model(layers, seed: int = 0, init: str = "torch", activation=torch.nn.ReLU,
               norm=None, bias: bool = True) -> torch.nn.Sequential:
    """Linear layers of these widths, ``activation`` (ReLU) between: parameters 0.weight,
    0.bias, 2.weight...

    ``norm`` (``torch.nn.BatchNorm1d``, say) puts ``norm(width)`` before each activation, so a
    model with batch statistics is the same builder (Linear, BatchNorm, ReLU, Linear: 0.weight,
    1.weight for the norm, 3.weight); ``bias=False`` leaves the Linear layers without bias.

    ``init="he"`` draws the weights from N(0, 2 / fan_in) and zeroes the biases (He et al.
    2015, "Delving deep into rectifiers"), which keeps the signal of a deep ReLU stack alive;
    torch's default divides its variance by about 6 per layer, so after 16 layers the first
    gradients are near 1e-10.
    """
    torch.manual_seed(seed)
    modules = []
    for i, (n_in, n_out) in enumerate(zip(layers[:-1], layers[1:])):
        modules += ([norm(n_in)] if i and norm is not None else []) + ([activation()] if i else [])
        modules.append(torch.nn.Linear(n_in, n_out, bias=bias))
        if init == "he":
            torch.nn.init.kaiming_normal_(modules[-1].weight, nonlinearity="relu")
            if bias:
                torch.nn.init.zeros_(modules[-1].bias)
    return torch.nn.Sequential(*modules)


def make_batch(layers, batch_size: int, world_size: int, seed: int, iteration: int):
    """The global batch of one iteration; rank r takes rows r*batch_size to (r+1)*batch_size."""
    g = torch.Generator().manual_seed(1_000_003 * seed + iteration)
    n = world_size * batch_size
    return torch.randn(n, layers[0], generator=g), torch.randn(n, layers[-1], generator=g)


def flat_grad(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def check_layers(layers) -> tuple:
    """``layers`` as a tuple of ints: a sequence, or text such as "64,1024,1024,10"."""
    if isinstance(layers, str):
        try:
            layers = [int(w) for w in layers.split(",")]
        except ValueError:
            raise ValueError(f"layers must be comma-separated ints, got {layers!r}") from None
    layers = tuple(layers)
    if len(layers) < 2:
        raise ValueError(f"layers needs at least 2 widths (inputs, outputs), got {layers}")
    for width in layers:
        positive_int("every width in layers", width)
    return layers


def param_count(layers) -> int:
    """Weights and biases of ``make_model(layers)``, without building it."""
    return sum(n_in * n_out + n_out for n_in, n_out in zip(layers[:-1], layers[1:]))
