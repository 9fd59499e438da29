"""The doctor's overhead per optimizer step: a clean script's median step under the doctor
against the same script alone under torchrun, in the same process of this benchmark (one
machine, one after the other, repeated). The goal is under 1.5x.

    python benchmarks/doctor.py [--repeats 3] [--width 256] [--steps 60]

The script (``doctor_clean_script.py``) times its own steps, so start-up (the doctor's zygote,
torchrun's rendezvous) is not counted; the doctor runs it with ``--steps`` and ``--batches``
high enough that it stops nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "doctor_clean_script.py")


def step_seconds(command: list[str], out: str) -> dict:
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    with open(out) as f:
        return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
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
