"""Bytes per rank, by category, for a model of ``parameters`` parameters: the chapter's
formulas, in one place. The page checks them against the bytes its runs count, and the
calculator on the page runs them in the reader's browser as JavaScript generated from this
module's source (``calculator_form``), so the two cannot drift.

A model, not a measurement: it counts parameters, gradients, DDP's buckets and optimizer state,
plus activations as a stated input; it leaves out the allocator's rounding, communication
buffers and everything that is not a tensor. Mixed precision ("bf16") is the ZeRO paper's
accounting (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", section 3.1): 2 bytes of bf16 parameters, 2 of bf16 gradients and
12 of fp32 Adam state (4 master weights, 4 momentum, 4 variance): 16 bytes per parameter.
"""

from __future__ import annotations

PRECISIONS = ("fp32", "bf16")
CALCULATOR_STRATEGIES = ("ddp", "zero1", "zero2", "fsdp")

# Bytes per parameter of the model's parameters and of its gradients (DDP's buckets are a
# copy of the gradients: the same bytes).
WEIGHT_BYTES = {"fp32": 4, "bf16": 2}
# Optimizer state per parameter in fp32 bytes: SGD none, momentum one buffer, Adam two
# (exp_avg, exp_avg_sq: torch/optim/adam.py, _init_group). bf16 adds 4 bytes of fp32 master
# weights (MASTER_BYTES).
STATE_BYTES = {"sgd": 0, "momentum": 4, "adam": 8}
MASTER_BYTES = {"fp32": 0, "bf16": 4}
# Adam also keeps one float32 ``step`` per parameter tensor (torch/optim/adam.py, _init_group:
# ``torch.tensor(0.0, dtype=_get_scalar_dtype())``); a rounding error for large models.
STEP_BYTES = {"sgd": 0, "momentum": 0, "adam": 4}
# What each strategy divides by the world size (1) or keeps whole (0), and whether it keeps
# DDP's buckets. ZeRO-1 shards optimizer state; ZeRO-2 also gradients; FSDP (ZeRO-3) also
# parameters. FSDP keeps one ``step`` per tensor on every rank (its tensors are all sharded).
SHARDS_STATE = {"ddp": 0, "zero1": 1, "zero2": 1, "fsdp": 1}
SHARDS_GRADIENTS = {"ddp": 0, "zero1": 0, "zero2": 1, "fsdp": 1}
SHARDS_PARAMETERS = {"ddp": 0, "zero1": 0, "zero2": 0, "fsdp": 1}
SHARDS_STEPS = {"ddp": 0, "zero1": 1, "zero2": 1, "fsdp": 0}
KEEPS_BUCKETS = {"ddp": 1, "zero1": 1, "zero2": 0, "fsdp": 0}

TABLES = ("WEIGHT_BYTES", "STATE_BYTES", "MASTER_BYTES", "STEP_BYTES", "SHARDS_STATE",
          "SHARDS_GRADIENTS", "SHARDS_PARAMETERS", "SHARDS_STEPS", "KEEPS_BUCKETS")


def share(nbytes, sharded, world_size):
    """``nbytes`` whole (sharded 0) or divided among ``world_size`` ranks (sharded 1)."""
    return nbytes / world_size if sharded == 1 else nbytes


def bytes_per_rank(parameters, optimizer, strategy, world_size, precision="fp32",
                   bucket_view=False, tensors=0, activation_bytes=0):
    """One rank's bytes by category; ``tensors``: the number of parameter tensors."""
    weight = WEIGHT_BYTES[precision]
    state = (STATE_BYTES[optimizer] + MASTER_BYTES[precision]) * parameters
    buckets = 0 if bucket_view else KEEPS_BUCKETS[strategy] * weight * parameters
    return {
        "parameters": share(weight * parameters, SHARDS_PARAMETERS[strategy], world_size),
        "gradients": share(weight * parameters, SHARDS_GRADIENTS[strategy], world_size),
        "buckets": buckets,
        "optimizer_state": share(state, SHARDS_STATE[strategy], world_size)
        + share(STEP_BYTES[optimizer] * tensors, SHARDS_STEPS[strategy], world_size),
        "activations": activation_bytes,
    }


def bytes_per_parameter(optimizer, strategy, world_size, precision="fp32", bucket_view=False):
    """Bytes per rank for each parameter of the model (activations and steps left out)."""
    parts = bytes_per_rank(1, optimizer, strategy, world_size, precision, bucket_view)
    return (parts["parameters"] + parts["gradients"] + parts["buckets"]
            + parts["optimizer_state"])


def largest_model(memory_bytes, optimizer, strategy, world_size, precision="fp32",
                  bucket_view=False, activation_bytes=0):
    """The most parameters whose bytes per rank fit in ``memory_bytes`` (one GPU's)."""
    per = bytes_per_parameter(optimizer, strategy, world_size, precision, bucket_view)
    return (memory_bytes - activation_bytes) / per
