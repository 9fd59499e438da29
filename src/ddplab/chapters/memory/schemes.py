"""The calculator's table by precision scheme, as the memory page prints it: for each way of
training (DDP, ZeRO-1, ZeRO-2, FSDP) under a precision scheme, the bytes per parameter a rank
holds between steps at several world sizes, and the largest model whose every rank fits in one
GPU's memory (:func:`calculator.largest_model`, which leaves room for the optimizer step's
temporaries). Formulas only, from :mod:`.calculator`; nothing runs."""

from __future__ import annotations

from ddplab.chapters.memory import calculator

ROWS = (  # (label, strategy, precision scheme, gradient_as_bucket_view)
    ("DDP", "ddp", "autocast", False), ("DDP, bucket view", "ddp", "autocast", True),
    ("ZeRO-1", "zero1", "autocast", False), ("ZeRO-1, bucket view", "zero1", "autocast", True),
    ("FSDP", "fsdp", "fsdp_policy", False),
    ("DDP, bucket view", "ddp", "bf16_master", True),
    ("ZeRO-1, bucket view", "zero1", "bf16_master", True),
    ("ZeRO-2", "zero2", "bf16_master", False), ("FSDP (ZeRO-3)", "fsdp", "bf16_master", False))
SHORT_NAMES = {"autocast": "autocast", "fsdp_policy": "MixedPrecisionPolicy",
               "bf16_master": "bf16 + fp32 master"}


def table(optimizer: str = "adam", world_sizes=(1, 8, 64), memory_bytes: float = 80e9,
          largest_at: int = 8) -> str:
    """One line per row of :data:`ROWS`: bytes per parameter per rank at each of
    ``world_sizes``, then the largest model (billions of parameters) for ``memory_bytes`` per
    rank at ``largest_at`` ranks."""
    lines = [f"{optimizer.capitalize()}: bytes per parameter per rank, and the largest model "
             f"for {memory_bytes / 1e9:g} GB per rank",
             f"{'ranks:':<42}" + "".join(f"{n:>10}" for n in world_sizes)
             + f"{f'largest, {largest_at}':>12}"]
    for label, strategy, scheme, view in ROWS:
        per = [calculator.bytes_per_parameter(optimizer, strategy, n, scheme, view)
               for n in world_sizes]
        most = calculator.largest_model(memory_bytes, optimizer, strategy, largest_at, scheme,
                                        view)
        lines.append(f"{label + ', ' + SHORT_NAMES[scheme]:<42}"
                     + "".join(f"{b:10.2f}" for b in per) + f"{most / 1e9:10.2f} B")
    return "\n".join(lines)
