"""The doctor's cost, two ways.

``--corpus`` (the time a reader waits for a diagnosis): for each script of the test corpus
that runs under torchrun, the doctor's wall time (``python -m ddplab doctor``, 2 ranks, its
default 8 steps) against the script's own plain run at the same step count (``torchrun
--nproc-per-node 2 benchmarks/plain_until.py 8 script``: one optimizer hook ends it at step
8), one after the other in a fresh folder each. The goal is at most 2x.

    python benchmarks/doctor.py --corpus [--repeats 1] [--only ref_]

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


def reference_said(stdout: bytes) -> str:
    """The reference run's verdict in the doctor's JSON report: passed, found, or n/a."""
    try:
        checks = json.loads(stdout)["checks"]
    except (ValueError, KeyError):
        return "?"
    verdict = next((c for c in checks if c.get("id") == "reference-differs"), None)
    return {"passed": "agrees", "found": "differs"}.get(verdict and verdict.get("status"),
                                                         "n/a")


def corpus(repeats: int, only: str = "") -> None:
    """The doctor's wall time (its N-rank run, the probe where it needs one, the one-process
    reference run, and judging) against the plain run's, per corpus script that runs under
    torchrun (a script that starts its own ranks, hangs or fails on its own is left out),
    with what the reference run said."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    plain_until = os.path.join(HERE, "plain_until.py")
    print(f"{'script':<28} {'plain s':>8} {'doctor s':>9} {'ratio':>6} {'reference':>9}  "
          f"(2 ranks, 8 steps, median of {repeats})")
    ratios = []
    for name in sorted(n for n in os.listdir(CORPUS) if n.startswith(only)):
        path = os.path.join(CORPUS, name)
        with open(path) as f:
            source = f.read()
        if not name.endswith(".py") or "init_process_group" not in source or "mp.spawn" in \
                source or name.startswith(("crash_", "plain_crash", "blog_", "local_rank")):
            continue
        plain, doctored, said = [], [], "?"
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as folder:
                seconds, code = wall([torchrun, "--standalone", "--nproc-per-node", "2",
                                      plain_until, "8", path, *CORPUS_ARGS.get(name, [])],
                                     folder)
                plain.append(seconds if code == 0 else None)
            with tempfile.TemporaryDirectory() as folder:
                started = time.perf_counter()
                done = subprocess.run([sys.executable, "-m", "ddplab", "doctor", "--json", path,
                                       *CORPUS_ARGS.get(name, [])], cwd=folder,
                                      capture_output=True, timeout=600)
                doctored.append(time.perf_counter() - started)
                said = reference_said(done.stdout)
        if None in plain:
            print(f"{name:<28} {'fails':>8} {sorted(doctored)[len(doctored) // 2]:>9.1f} "
                  f"{'':>6} {said:>9}")
            continue
        a, d = sorted(plain)[len(plain) // 2], sorted(doctored)[len(doctored) // 2]
        ratios.append(d / a)
        print(f"{name:<28} {a:>8.1f} {d:>9.1f} {d / a:>6.2f} {said:>9}")
    ratios.sort()
    print(f"median ratio {ratios[len(ratios) // 2]:.2f}x over {len(ratios)} scripts, "
          f"from {ratios[0]:.2f}x to {ratios[-1]:.2f}x (goal: at most 2x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", action="store_true",
                        help="the doctor's wall time against plain runs, over the corpus")
    parser.add_argument("--only", default="", metavar="PREFIX",
                        help="with --corpus: only the scripts whose name starts so")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    if args.corpus:
        return corpus(args.repeats, args.only)
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
