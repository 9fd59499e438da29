"""What do bucket sizes cost in step time here? Naive, one huge bucket, DDP's default, tiny ones.

    python benchmarks/bucket_overlap.py [--world-sizes 2,4] [--depth 2,4] [--steps 20] [--rounds 3]

Each setting times ``--steps`` training steps (forward, backward, SGD step) of the MLP
``64, 1024 x depth, 10`` with 32 samples per rank, after 2 warm-up steps
(``ddplab.chapters.buckets.overlap.steps``), with no hook installed (``record=False``), except in
the "recorded" row, which is what the chapter's timelines cost. Settings are interleaved over
``--rounds`` rounds so that drift of a shared machine spreads over all of them; the figure is
the median over every step of every round (slowest rank's step). Ratios are against DDP's
default measured in the same process.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from ddplab.chapters.buckets import overlap

SETTINGS = {  # label -> overlap.run arguments
    "no communication": dict(mode="local"),
    "naive, per parameter": dict(mode="naive"),
    "DDP, one bucket (cap 1000)": dict(bucket_cap_mb=1000),
    "DDP, default (25, first 1)": dict(bucket_cap_mb=None),
    "DDP, tiny (cap 0.001)": dict(bucket_cap_mb=0.001),
    "DDP, default, recorded": dict(bucket_cap_mb=None, record=True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-sizes", default="2,4")
    parser.add_argument("--depth", default="2,4")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"torch {torch.__version__}; median step time (ms), {args.rounds} rounds x "
          f"{args.steps} steps; ratio against DDP's default")
    for world_size in map(int, args.world_sizes.split(",")):
        for depth in map(int, args.depth.split(",")):
            times = {label: [] for label in SETTINGS}
            for _ in range(args.rounds):
                for label, kwargs in SETTINGS.items():
                    kwargs = {"record": False, **kwargs}
                    result = overlap.run(world_size=world_size, depth=depth,
                                         iterations=args.steps, **kwargs)
                    times[label] += [1e3 * t for t in result.step_s]
            base = statistics.median(times["DDP, default (25, first 1)"])
            print(f"\nworld size {world_size}, MLP 64, 1024 x {depth}, 10")
            for label, values in times.items():
                median = statistics.median(values)
                print(f"  {label:<28} {median:8.1f} ms  {median / base:5.2f}x")


if __name__ == "__main__":
    main()
