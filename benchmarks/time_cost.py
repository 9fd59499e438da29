"""Where does the time of a DDP step go on this machine? The all-reduce table and the step
breakdown, with the memory-copy limit measured in the same run.

    python benchmarks/time_cost.py [--world-sizes 2,4] [--steps 7] [--rounds 2]

Prints, for each world size: the all-reduce of float32 tensors from 4 KiB to 64 MiB (median
time on the slowest rank, algbw and busbw as nccl-tests defines them, the fit
``T(S) = alpha + S/B``) and rank 0's memory-copy bandwidth (the fastest of 10 copies of 64 MiB,
as STREAM reports its kernels), then the phases of the chapter's step (an MLP of 16
``Linear(512, 512)``, 32 samples per rank) without DDP and with it, their steps alternating.
Rounds repeat the whole table, so that drift of a shared machine shows as spread between
rounds. All figures are CPU ranks on gloo; see the chapter "The time cost".
"""

from __future__ import annotations

import argparse

import torch

from ddplab.chapters.time_cost import allreduce, step_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-sizes", default="2,4")
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    world_sizes = [int(w) for w in args.world_sizes.split(",")]
    print(f"torch {torch.__version__}; {args.rounds} round(s)")
    for r in range(args.rounds):
        print(f"\n=== round {r + 1}")
        for world_size in world_sizes:
            print()
            print(allreduce.run(world_size).describe())
        print(f"\nstep of the chapter's MLP, 32 samples per rank: the median of {args.steps} "
              f"steps, each the slowest rank's")
        runs = [result for world_size in (1, *world_sizes)
                for result in step_time.paired(world_size, iterations=args.steps)]
        print(step_time.describe_breakdown(runs))


if __name__ == "__main__":
    main()
