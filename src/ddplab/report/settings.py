"""What a report measures: the sizes, models and repeats of each stage, full or ``--quick``,
checked in the caller before any rank starts."""

from __future__ import annotations

import dataclasses
import math

from ddplab.common.checks import a_bool, positive_int, positive_number

KiB, MiB = 2 ** 10, 2 ** 20
DEPTH = 16  # Linear(width, width) layers of the step's MLP, as in the chapter "The time cost"
# The chapter's model (16 x 512 x 512, 4.2 M parameters): 17 MB of float32 per copy, small
# enough for any GPU and for a CPU rank.
DEFAULT_PARAMS_MILLIONS = 4.2
MAX_PARAMS_MILLIONS = 100_000  # the memory check below refuses what the machine cannot hold
BATCH_SIZE = 32  # samples per rank, the chapter's
MICRO_BATCH_SIZE = 8  # samples per micro-batch in the accumulation stage, the chapter's


def layers_for(params_millions: float) -> tuple[int, ...]:
    """``DEPTH`` equal layers whose weights and biases come nearest ``params_millions`` M;
    widths are multiples of 8."""
    width = max(8, 8 * round(math.sqrt(params_millions * 1e6 / DEPTH) / 8))
    return (width,) * (DEPTH + 1)


@dataclasses.dataclass(frozen=True)
class ReportSettings:
    world_size: int
    params_millions: float | None = None  # None: the chapter's model, full or quick
    quick: bool = False
    timeout: float = 120.0

    def __post_init__(self):
        positive_int("world_size", self.world_size)
        a_bool("quick", self.quick)
        if self.params_millions is not None:
            positive_number("params_millions", self.params_millions)
            if self.params_millions > MAX_PARAMS_MILLIONS:
                raise ValueError(f"params_millions must be at most {MAX_PARAMS_MILLIONS:,}, "
                                 f"got {self.params_millions!r}")
        positive_number("timeout", self.timeout)

    @property
    def layers(self) -> tuple[int, ...]:
        return layers_for(self.params_millions or DEFAULT_PARAMS_MILLIONS)

    @property
    def sizes(self) -> tuple[int, ...]:
        """All-reduce message sizes: 4 KiB to 16 MiB quick (the chapter's fit, its model's
        gradients), else to 256 MiB (cut by memory)."""
        top = 16 * MiB if self.quick else 256 * MiB
        return tuple(s for s in (4 * KiB * 4 ** i for i in range(10)) if s <= top)

    repeats = property(lambda self: 3 if self.quick else 7)
    iterations = property(lambda self: 5 if self.quick else 7)
    # bucket_cap_mb values: one bucket, a few, many (the chapter sweeps 100 down to 0.001)
    caps = property(lambda self: (25.0, 2.0, 0.25) if self.quick else (100.0, 8.0, 2.0, 1.0,
                                                                         0.25))
    micro_batches = property(lambda self: (1, 4) if self.quick else (1, 2, 4, 8))
    accumulation_iterations = 3  # the chapter's default: fewer gave steps 5-7x the model's
    memory_params_millions = property(lambda self: 1.0 if self.quick else 8.0)
    # FSDP's run adds a DDP reference run of its own: left to the full report
    strategies = property(lambda self: ("ddp", "zero1") if self.quick else ("ddp", "zero1",
                                                                             "fsdp"))

    def to_json(self) -> dict:
        return {"world_size": self.world_size, "quick": self.quick,
                "params": sum(a * b + b for a, b in zip(self.layers[:-1], self.layers[1:])),
                "layers": list(self.layers), "batch_size": BATCH_SIZE,
                "timeout_s": self.timeout,
                "allreduce_sizes_bytes": list(self.sizes)}

