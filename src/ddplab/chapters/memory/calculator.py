"""Bytes per rank, by category, for a model of ``parameters`` parameters: the chapter's
formulas, in one place. The page checks them against the bytes its runs count, and the
calculator on the page runs them in the reader's browser as JavaScript generated from this
module's source (``calculator_form``), so the two cannot drift.

A model of the steady state, not a measurement: what a rank holds from backward through the
optimizer step (parameters, gradients, DDP's buckets, optimizer state; the page counts it after
a step, before ``zero_grad``), plus activations as a stated input. It leaves out
the allocator's rounding, communication buffers, everything that is not a tensor, and the
peaks inside a step: FSDP's all-gathered layer during forward and backward, and the optimizer
step's own temporaries. ``largest_model`` leaves room for the step's temporaries (see
``STEP_TEMPORARY_BYTES``); the GPU's measured peak is the GPU chapter's.

Precision schemes (``PRECISIONS``), each per parameter:

* ``autocast``, the default: ``torch.autocast`` computes matmuls in bf16 but keeps the
  parameters, so their gradients, DDP's buckets (in the gradients' dtype) and the optimizer's
  state are fp32, exactly as without it: 4 + 4 + 4 + 8 bytes with Adam. It saves activations
  and time, never these bytes (the page counts it in runs).
* ``fp32``: no mixed precision; the same bytes as autocast.
* ``bf16_master``: bf16 parameters and gradients (and buckets) with an fp32 master copy kept
  beside them, by hand or by a library that does (the ZeRO paper's accounting, Rajbhandari et
  al. 2020, section 3.1: 2 + 2 + 12). PyTorch's ``ZeroRedundancyOptimizer`` has no master-weight
  mode: its ZeRO rows assume the master copy is sharded with the optimizer state, as DeepSpeed
  does.
* ``fsdp_policy``: FSDP2's ``MixedPrecisionPolicy(param_dtype=torch.bfloat16)``. The sharded
  parameters stay in their own dtype, fp32 ("FSDP ... keeps the high-precision sharded
  parameters in memory anyway": its docstring, ``torch/distributed/fsdp/_fully_shard/
  _fsdp_api.py``); only the all-gathered, unsharded parameters a layer computes with are bf16
  (``FSDPParam.init_unsharded_param``, ``_fsdp_param.py``), freed after use; reduced gradients
  are cast back to fp32 (``_to_dtype_if_needed(reduce_output, orig_dtype)`` in
  ``foreach_reduce``, ``_fsdp_collectives.py``). Steady state: fp32 FSDP's bytes. FSDP only.
"""

from __future__ import annotations

import dataclasses

PRECISIONS = ("autocast", "fp32", "bf16_master", "fsdp_policy")
PRECISION_NAMES = {
    "autocast": "torch.autocast (fp32 parameters, gradients, optimizer state)",
    "fp32": "fp32, no mixed precision",
    "bf16_master": "bf16 parameters and gradients + fp32 master copy",
    "fsdp_policy": "FSDP2 MixedPrecisionPolicy(param_dtype=bf16)",
}
CALCULATOR_STRATEGIES = ("ddp", "zero1", "zero2", "fsdp")

# Bytes per parameter of the parameters a rank keeps and of their gradients (DDP's buckets are
# a copy of the gradients, in their dtype: the same bytes).
WEIGHT_BYTES = {"autocast": 4, "fp32": 4, "bf16_master": 2, "fsdp_policy": 4}
# Optimizer state per parameter in fp32 bytes: SGD none, momentum one buffer, Adam two
# (exp_avg, exp_avg_sq: torch/optim/adam.py, _init_group). bf16_master adds 4 bytes of fp32
# master weights (MASTER_BYTES).
STATE_BYTES = {"sgd": 0, "momentum": 4, "adam": 8}
MASTER_BYTES = {"autocast": 0, "fp32": 0, "bf16_master": 4, "fsdp_policy": 0}
# A scheme that only one strategy has ("" for none): MixedPrecisionPolicy is fully_shard's.
ONLY_WITH = {"autocast": "", "fp32": "", "bf16_master": "", "fsdp_policy": "fsdp"}
# Adam also keeps one float32 ``step`` per parameter tensor (torch/optim/adam.py, _init_group:
# ``torch.tensor(0.0, dtype=_get_scalar_dtype())``); a rounding error for large models.
STEP_BYTES = {"sgd": 0, "momentum": 0, "adam": 4}
# Inside optimizer.step(), on top of the steady state: on a GPU the default Adam is the
# foreach version (_default_to_fused_or_foreach, torch/optim/optimizer.py: foreach for CUDA
# tensors), whose ``exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)``
# (_multi_tensor_adam, torch/optim/adam.py) allocates a copy of exp_avg_sq, 4 bytes per
# parameter it steps; SGD's foreach step works in place (_multi_tensor_sgd, torch/optim/sgd.py).
# A master copy's optimizer also needs fp32 gradients to step on, 4 bytes per parameter.
STEP_TEMPORARY_BYTES = {"sgd": 0, "momentum": 0, "adam": 4}
MASTER_GRADIENT_BYTES = {"autocast": 0, "fp32": 0, "bf16_master": 4, "fsdp_policy": 0}
# What each strategy divides by the world size (1) or keeps whole (0), and whether it keeps
# DDP's buckets. ZeRO-1 shards optimizer state; ZeRO-2 also gradients; FSDP (ZeRO-3) also
# parameters. FSDP keeps one ``step`` per tensor on every rank (its tensors are all sharded).
SHARDS_STATE = {"ddp": 0, "zero1": 1, "zero2": 1, "fsdp": 1}
SHARDS_GRADIENTS = {"ddp": 0, "zero1": 0, "zero2": 1, "fsdp": 1}
SHARDS_PARAMETERS = {"ddp": 0, "zero1": 0, "zero2": 0, "fsdp": 1}
SHARDS_STEPS = {"ddp": 0, "zero1": 1, "zero2": 1, "fsdp": 0}
KEEPS_BUCKETS = {"ddp": 1, "zero1": 1, "zero2": 0, "fsdp": 0}

TABLES = ("WEIGHT_BYTES", "STATE_BYTES", "MASTER_BYTES", "ONLY_WITH", "STEP_BYTES",
          "STEP_TEMPORARY_BYTES", "MASTER_GRADIENT_BYTES", "SHARDS_STATE", "SHARDS_GRADIENTS",
          "SHARDS_PARAMETERS", "SHARDS_STEPS", "KEEPS_BUCKETS")


def share(nbytes, sharded, world_size):
    """``nbytes`` whole (sharded 0) or divided among ``world_size`` ranks (sharded 1)."""
    return nbytes / world_size if sharded == 1 else nbytes


def bytes_per_rank(parameters, optimizer, strategy, world_size, precision="autocast",
                   bucket_view=False, tensors=0, activation_bytes=0):
    """One rank's bytes by category in the steady state; ``tensors``: parameter tensors."""
    if ONLY_WITH[precision] != "" and ONLY_WITH[precision] != strategy:
        raise ValueError("precision " + precision + " is for strategy " + ONLY_WITH[precision]
                         + " only, not " + strategy)
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


def bytes_per_parameter(optimizer, strategy, world_size, precision="autocast",
                        bucket_view=False):
    """Bytes per rank for each parameter of the model in the steady state (activations and
    Adam's ``step`` counters left out)."""
    parts = bytes_per_rank(1, optimizer, strategy, world_size, precision, bucket_view)
    return (parts["parameters"] + parts["gradients"] + parts["buckets"]
            + parts["optimizer_state"])


def step_temporary_per_parameter(optimizer, strategy, world_size, precision="autocast"):
    """What ``optimizer.step()`` allocates on top, per parameter of the model: on a rank, the
    optimizer steps its own share (all under DDP)."""
    return share(STEP_TEMPORARY_BYTES[optimizer] + MASTER_GRADIENT_BYTES[precision],
                 SHARDS_STATE[strategy], world_size)


def largest_model(memory_bytes, optimizer, strategy, world_size, precision="autocast",
                  bucket_view=False, activation_bytes=0):
    """The most parameters whose bytes per rank fit in ``memory_bytes`` (one GPU's) both during
    backward, with the activations, and during the optimizer step, with its temporaries (the
    activations are freed by then): a model that only just fits the steady state runs out of
    memory in its first step."""
    per = bytes_per_parameter(optimizer, strategy, world_size, precision, bucket_view)
    with_activations = (memory_bytes - activation_bytes) / per
    in_the_step = memory_bytes / (
        per + step_temporary_per_parameter(optimizer, strategy, world_size, precision))
    return with_activations if with_activations < in_the_step else in_the_step


# The ways the chapter's decision rule goes through, in its order: (label, strategy, bucket view)
WAYS = (("DDP", "ddp", False), ("ZeRO-1, bucket view", "zero1", True), ("FSDP", "fsdp", False))


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One model's bytes per rank each way (``WAYS``): held in the steady state, and during
    the optimizer step with its temporaries; whether the larger fits ``memory_bytes``."""

    parameters: float
    optimizer: str
    world_size: int
    memory_bytes: float
    held: dict
    in_the_step: dict
    fits: dict

    def describe(self) -> str:
        lines = [f"{self.parameters / 1e9:g} B parameters, {self.optimizer}, "
                 f"{self.world_size} GPUs of {self.memory_bytes / 1e9:g} GB, autocast; "
                 "GB per rank, activations not counted:"]
        lines += [f"  {label:<22}{self.held[label] / 1e9:6.1f} held, "
                  f"{self.in_the_step[label] / 1e9:6.1f} in the optimizer step: "
                  + (f"fits, {(self.memory_bytes - self.held[label]) / 1e9:.1f} left for "
                     "activations" if self.fits[label] else "does not fit")
                  for label, *_ in WAYS]
        return "\n".join(lines)


def compare(parameters, optimizer, world_size, memory_bytes):
    """``Comparison`` of ``WAYS`` for one model, under autocast (the chapter's default)."""
    held, step, fits = {}, {}, {}
    for label, strategy, view in WAYS:
        held[label] = sum(bytes_per_rank(parameters, optimizer, strategy, world_size,
                                         bucket_view=view).values())
        step[label] = held[label] + parameters * step_temporary_per_parameter(
            optimizer, strategy, world_size)
        fits[label] = max(held[label], step[label]) <= memory_bytes
    return Comparison(parameters, optimizer, world_size, memory_bytes, held, step, fits)
