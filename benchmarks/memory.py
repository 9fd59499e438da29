"""What sharding costs in time: a step of ZeRO-1, of FSDP2 and of DDP with the bucket view, as
a ratio to plain DDP's, measured side by side on the same ranks (steps alternating).

    python benchmarks/memory.py [--world-sizes 2,4] [--params-millions 8] [--steps 5]

CPU ranks on gloo, two cores: ranks beyond two share them. See the chapter "Memory".
"""

from __future__ import annotations

import argparse

import torch

from ddplab.chapters.memory import step_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-sizes", default="2,4")
    parser.add_argument("--params-millions", type=float, default=8.0)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    print(f"torch {torch.__version__}")
    for world_size in [int(w) for w in args.world_sizes.split(",")]:
        for optimizer in ("sgd", "adam"):
            print(step_time.run(world_size, optimizer, args.params_millions,
                                args.steps).describe())


if __name__ == "__main__":
    main()
