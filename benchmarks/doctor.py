"""The doctor's cost, two ways.

``--corpus`` (the time a reader waits for a diagnosis): for each script of the test corpus
that runs under torchrun, the doctor's wall time (``python -m ddplab doctor``, 2 ranks, its
default 8 steps) against the script's own plain run at the same step count (``torchrun
--nproc-per-node 2 benchmarks/plain_until.py 8 script``: one optimizer hook ends it at step
8), one after the other in a fresh folder each. The goal is at most 2x.

    python benchmarks/doctor.py --corpus [--repeats 1]

The default, the overhead per optimizer step: a clean script's median step under the doctor
against the same script alone under torchrun (``doctor_clean_script.py`` times its own steps,
so start-up is not counted; the doctor runs it with ``--steps`` and ``--batches`` high enough
that it stops nothing). The goal is under 1.5x.

    python benchmarks/doctor.py [--repeats 3] [--width 256] [--steps 60]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "doctor_clean_script.py")


def step_seconds(command: list[str], out: str) -> dict:
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    with open(out) as f:
        return json.load(f)


CORPUS = os.path.join(os.path.dirname(HERE), "tests", "doctor_corpus")
CORPUS_ARGS = {"tutorial_torchrun.py": ["3", "1"], "tutorial_torchrun_clean.py": ["3", "1"]}


def wall(command: list[str], folder: str) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, timeout=600)
    return time.perf_counter() - started, done.returncode


def corpus(repeats: int) -> None:
    """The doctor's wall time against the plain run's, per corpus script that runs under
    torchrun (a script that starts its own ranks, hangs or fails on its own is left out)."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    plain_until = os.path.join(HERE, "plain_until.py")
    print(f"{'script':<28} {'plain s':>8} {'doctor s':>9} {'ratio':>6}  (2 ranks, 8 steps, "
          f"median of {repeats})")
    ratios = []
    for name in sorted(os.listdir(CORPUS)):
        path = os.path.join(CORPUS, name)
        with open(path) as f:
            source = f.read()
        if not name.endswith(".py") or "init_process_group" not in source or "mp.spawn" in \
                source or name.startswith(("crash_", "plain_crash", "blog_", "local_rank")):
            continue
        plain, doctored = [], []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as folder:
                seconds, code = wall([torchrun, "--standalone", "--nproc-per-node", "2",
                                      plain_until, "8", path, *CORPUS_ARGS.get(name, [])],
                                     folder)
                plain.append(seconds if code == 0 else None)
            with tempfile.TemporaryDirectory() as folder:
                doctored.append(wall([sys.executable, "-m", "ddplab", "doctor", path,
                                      *CORPUS_ARGS.get(name, [])], folder)[0])
        if None in plain:
            print(f"{name:<28} {'fails':>8} {sorted(doctored)[len(doctored) // 2]:>9.1f}")
            continue
        a, d = sorted(plain)[len(plain) // 2], sorted(doctored)[len(doctored) // 2]
        ratios.append(d / a)
        print(f"{name:<28} {a:>8.1f} {d:>9.1f} {d / a:>6.2f}")
    ratios.sort()
    print(f"median ratio {ratios[len(ratios) // 2]:.2f}x over {len(ratios)} scripts, "
          f"from {ratios[0]:.2f}x to {ratios[-1]:.2f}x (goal: at most 2x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", action="store_true",
                        help="the doctor's wall time against plain runs, over the corpus")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    if args.corpus:
        return corpus(args.repeats)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "steps.json")
        script = [SCRIPT, out, "--steps", str(args.steps), "--width", str(args.width)]
        alone, doctored = [], []
        for _ in range(args.repeats):
            alone.append(step_seconds(
                [torchrun, "--standalone", "--nproc-per-node", "2", *script], out))
            doctored.append(step_seconds(
                [sys.executable, "-m", "ddplab", "doctor", "--steps", str(args.steps + 10),
                 "--batches", "100000", *script], out))
    print(f"model: {alone[0]['params']:,} parameters, 2 gloo ranks on CPU, "
          f"{args.steps} steps, median of {args.repeats} runs each")
    for statistic in ("median_step_s", "mean_step_s"):
        a = sorted(r[statistic] for r in alone)[len(alone) // 2]
        d = sorted(r[statistic] for r in doctored)[len(doctored) // 2]
        print(f"{statistic.split('_')[0]} step: alone {1e3 * a:.2f} ms, under the doctor "
              f"{1e3 * d:.2f} ms: {d / a:.2f}x (goal: under 1.5x)")


if __name__ == "__main__":
    main()
