"""Activations: what a forward keeps for backward, how to measure it, and two ways to cut it.

The chapter's runs use a batch of a few samples, so their activations look negligible. In real
runs they are where memory runs out: they grow with the batch per rank (and the sequence
length), not with the model alone, and DDP does not divide them. This module counts them on a
stack of transformer-like MLP blocks (``Linear(width, 4 width)``, GELU, ``Linear(4 width,
width)``: each block keeps its input, GELU's input and the second layer's input, nine widths a
row) with many rows per batch (a batch of sequences flattened to rows, as a transformer's
linear layers see it), three ways, as the bytes allocated during the forward and still held
when backward starts (``torch.cuda.memory_allocated`` on a GPU; on a CPU glibc's count,
``malloc_count.in_use``, the chapter's second measurement). A count of the tensors autograd
saves (``accounting.SavedForBackward``) cannot be used here: inside a non-reentrant checkpoint,
the checkpoint's own saved-tensor hooks take the place of the counter's.

- ``fp32``: the plain forward;
- ``checkpointed``: ``torch.utils.checkpoint.checkpoint_sequential(..., use_reentrant=False)``
  with a segment per block, which keeps each block's input only and recomputes the rest in
  backward (its last segment runs without a checkpoint, as ``checkpoint_sequential`` does);
- ``bf16 autocast``: ``torch.autocast(device_type, dtype=torch.bfloat16)``, whose layers save
  their inputs in bf16, 2 bytes instead of 4 (and, for backward, bf16 copies of the weights).

Activations are each rank's own (DDP changes nothing in them), so the count runs here in the
caller's process; the gradients of the checkpointed forward are compared with the plain one's.
Checkpointing's recomputation holds one segment's activations again during backward, so the
step's peak (``torch.cuda.max_memory_allocated`` after ``torch.cuda.reset_peak_memory_stats``
on a GPU) is above what the forward kept.
"""

from __future__ import annotations

import dataclasses
import gc

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint_sequential

from ddplab.chapters.memory import malloc_count
from ddplab.common.checks import int_at_least, positive_int
from ddplab.common.results import Result

WAYS = ("fp32", "checkpointed", "bf16 autocast")


def mlp_block(width: int) -> torch.nn.Sequential:
    """A transformer's MLP block: up to four times the width, GELU, back down."""
    return torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                               torch.nn.Linear(4 * width, width))


def checkpointed_forward(model: torch.nn.Sequential, X: torch.Tensor, segments: int):
    """The forward with activation checkpointing: each of ``segments`` keeps its input only;
    backward runs the segment again (but the last, which runs plainly). ``use_reentrant=False``
    is the variant DDP's graph search sees (the training-loop chapter runs both under DDP)."""
    return checkpoint_sequential(model, segments, X, use_reentrant=False)


def autocast_forward(model: torch.nn.Module, X: torch.Tensor):
    """The forward under bf16 autocast, on the tensor's own device type (``cuda`` on GPUs)."""
    with torch.autocast(X.device.type, dtype=torch.bfloat16):
        return model(X)


def allocated(device: torch.device) -> int:
    """Bytes in use on ``device``: the CUDA caching allocator's count, or glibc's on a CPU."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    return malloc_count.in_use()


def activation_bytes(forward, X, y, allocated=torch.cuda.memory_allocated) -> int:
    """What ``forward(X)`` keeps for backward: the bytes allocated during the forward and not
    yet freed when backward starts (the loss's graph holds them); backward frees them.
    ``allocated(device)``: the bytes in use on the device (CUDA's caching allocator's count)."""
    gc.collect()
    before = allocated(X.device)
    loss = F.mse_loss(forward(X).float(), y)
    kept = allocated(X.device) - before
    loss.backward()
    return kept


@dataclasses.dataclass
class Activations(Result):
    """Activation bytes of one forward, three ways, beside the model's parameter bytes."""

    rows: int  # samples x sequence length: the rows each linear layer sees
    width: int
    depth: int
    segments: int
    parameter_bytes: int
    bytes_by_way: dict[str, int]
    max_grad_diff_checkpointed: float  # against the plain forward's gradients

    def describe(self) -> str:
        lines = [f"{self.depth} MLP blocks of width {self.width}, {self.rows:,} rows a batch: "
                 f"parameters {self.parameter_bytes / 1e6:.1f} MB"]
        for way, nbytes in self.bytes_by_way.items():
            lines.append(f"  activations, {way + ':':<15}{nbytes / 1e6:8.1f} MB"
                         f"  ({nbytes / self.parameter_bytes:.1f} x the parameters)")
        return "\n".join(lines)


def run(rows: int = 1024, width: int = 128, depth: int = 4, segments: int = 4,
        device: str = "cpu", seed: int = 0) -> Activations:
    positive_int("rows", rows)
    positive_int("width", width)
    depth = int_at_least("depth", depth, 2, "checkpointing needs blocks to group")
    segments = int_at_least("segments", segments, 1)
    if segments > depth:
        raise ValueError(f"segments must be at most depth ({depth}), got {segments}")
    torch.manual_seed(seed)
    model = torch.nn.Sequential(*(mlp_block(width) for _ in range(depth))).to(device)
    X, y = torch.randn(rows, width, device=device), torch.randn(rows, width, device=device)
    forwards = {"fp32": model, "checkpointed": lambda x: checkpointed_forward(model, x, segments),
                "bf16 autocast": lambda x: autocast_forward(model, x)}
    counted, grads = {}, {}
    for way in WAYS:
        for _ in range(2):  # the first call of a way allocates torch's own lazy state: not counted
            model.zero_grad(set_to_none=True)
            counted[way] = activation_bytes(forwards[way], X, y, allocated)
        grads[way] = [p.grad.clone() for p in model.parameters()]
    diff = max(float((a - b).abs().max()) for a, b in zip(grads["fp32"], grads["checkpointed"]))
    return Activations(rows, width, depth, segments,
                       sum(p.numel() * p.element_size() for p in model.parameters()),
                       counted, diff)
