"""How fast does real DDP come back? The warm pool against a fresh interpreter and cold spawn.

    python benchmarks/pool_latency.py [--repeats 30] [--fresh 3]
    python benchmarks/pool_latency.py --moves 10


One tiny DDP step (``chapters.running.first_group.ddp_step``: Linear(16, 4), 8 samples per rank,
mean loss, forward + backward + all-reduce) is timed three ways, side by side:

* warm: ``ddplab.run`` on the shared pool after one call at that world size (median of N);
* first result: a fresh ``python`` runs a notebook's first cells, ``import ddplab``,
  ``ddplab.placed(...)`` (which prestarts the forkserver), the chapter's import, then
  ``ddplab.run`` once; the time from starting that interpreter to its result (median of K), for
  the forkserver with prestart (the default), without (``DDPLAB_PRESTART=0``), and for the
  spawn start method;
* cold: ``torch.multiprocessing.spawn`` of W processes that form a group, run the step, exit.

Ratios are against the warm median measured in this same process.

``--moves N`` times only world-size moves instead: ``first_group.report`` (one all-reduce)
alternating over 2, 4 and 8 ranks, N rounds; each call after a move against a call that repeats
the size right after it (the pool keeps a group per world size: a move should cost no more).
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import statistics
import subprocess
import sys
import time

import torch.distributed as dist
import torch.multiprocessing

import ddplab
from ddplab.chapters.running import first_group as check
from ddplab.engine.rank import RankContext

WORLD_SIZES = (1, 2, 4, 8)
FIRST_RESULT = """
import time, sys
import ddplab
ddplab.placed(largest_world_size={world_size})  # a notebook's first cell: starts the forkserver
from ddplab.chapters.running import first_group as check
ddplab.run(check.ddp_step, {world_size})
print(time.time())
"""


def warm_median(world_size: int, repeats: int) -> float:
    ddplab.run(check.ddp_step, world_size)  # forms the group at this size
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        ddplab.run(check.ddp_step, world_size)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def moves_and_stays(rounds: int, sizes=(2, 4, 8)) -> tuple[float, float]:
    """Median seconds of a call that moves to another world size, and of one at the same."""
    for w in sizes:  # the first visit of each size forms its group
        ddplab.run(check.report, w)
    moves, stays = [], []
    for _ in range(rounds):
        for w in sizes:
            for times in (moves, stays):
                start = time.perf_counter()
                reports = ddplab.run(check.report, w)
                times.append(time.perf_counter() - start)
                assert reports[0]["rank_sum"] == w * (w - 1) // 2
    return statistics.median(moves), statistics.median(stays)


def first_result(world_size: int, repeats: int, **env) -> float:
    times = []
    for _ in range(repeats):
        start = time.time()
        done = subprocess.run([sys.executable, "-c", FIRST_RESULT.format(world_size=world_size)],
                              capture_output=True, text=True, env={**os.environ, **env},
                              check=True)
        times.append(float(done.stdout.split()[-1]) - start)
    return statistics.median(times)


def _cold_rank(rank: int, world_size: int, port: int) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=120))
    ctx = RankContext(rank, world_size, rank, torch.device("cpu"), "gloo", "localhost")
    check.ddp_step(ctx)
    dist.destroy_process_group()


def cold_spawn(world_size: int) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.perf_counter()
    torch.multiprocessing.spawn(_cold_rank, args=(world_size, port), nprocs=world_size)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="warm calls per world size")
    parser.add_argument("--fresh", type=int, default=3, help="fresh interpreters per cell")
    parser.add_argument("--moves", type=int, default=0,
                        help="only time N rounds of world-size moves (2, 4, 8)")
    args = parser.parse_args()
    if args.moves:
        move, stay = moves_and_stays(args.moves)
        print(f"world-size move {move * 1e3:.1f} ms, same size {stay * 1e3:.1f} ms (medians, "
              f"{args.moves} rounds of 2, 4, 8 ranks): move / same {move / stay:.2f}")
        return
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, gloo on CPU ranks\n")
    header = (f"{'world':>5} {'warm median':>12} {'first result':>13} {'  no prestart':>13} "
              f"{'spawn method':>13} {'cold spawn':>11} {'cold/warm':>10}")
    print(header)
    rows = {}
    for w in WORLD_SIZES:
        warm = warm_median(w, args.repeats)
        first = first_result(w, args.fresh)
        late = first_result(w, args.fresh, DDPLAB_PRESTART="0")
        spawn = first_result(w, 1, DDPLAB_START_METHOD="spawn")
        cold = cold_spawn(w)
        rows[w] = (warm, first, cold)
        print(f"{w:>5} {warm * 1e3:>9.1f} ms {first:>11.2f} s {late:>11.2f} s {spawn:>11.2f} s "
              f"{cold:>9.2f} s {cold / warm:>9.0f}x", flush=True)
    warm4, _, cold4 = rows[4]
    print(f"\ntargets: warm median at world size 4 <= 30 ms: {warm4 * 1e3:.1f} ms "
          f"({'met' if warm4 <= 0.030 else 'MISSED'}); at least 100x faster than cold spawn: "
          f"{cold4 / warm4:.0f}x ({'met' if cold4 / warm4 >= 100 else 'MISSED'}); first result "
          f"at world size 8 <= 2.5 s: {rows[8][1]:.2f} s "
          f"({'met' if rows[8][1] <= 2.5 else 'MISSED'})")


if __name__ == "__main__":
    main()
