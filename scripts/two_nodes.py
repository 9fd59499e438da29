"""Two torchrun nodes on this machine: the multi-node path readers use, run end to end.

    python scripts/two_nodes.py [--timeout 180] [--report-out _build/report-two-nodes]

Starts two torchrun agents, as two nodes would (``--nnodes 2 --nproc-per-node 1``, c10d
rendezvous at a store this script hosts on 127.0.0.1), each running ``python -m ddplab
averaging --json``, and checks that the JSON printed (by global rank 0, on whichever node it
is) equals the local warm pool's at world size 2: the same gradients on every rank, the same
reference. Exits non-zero on a difference, an error or the timeout; every process it started is
ended either way. Then the same two nodes run ``python -m ddplab report --quick``: rank 0 (on
either node) must write ``report.json`` and ``report.html`` under ``--report-out``, its JSON
complete (``ddplab.report.schema``) at world size 2. Nothing listens beyond loopback meanwhile:
the agents' line and environment are the running page's (``ddplab.chapters.running.two_nodes``,
whose docstring says how each store is kept on 127.0.0.1).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

from ddplab.chapters.running.two_nodes import LOOPBACK_ENV, node_command, rendezvous_on_loopback

TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
EXPERIMENT = ["averaging", "--batch-size", "8", "--reduction", "mean", "--json"]
TOLERANCE = 1e-6  # both runs sum the same two gradients with gloo; float32 rounding at most


def agents(endpoint: str, arguments=EXPERIMENT) -> list[subprocess.Popen]:
    command = [TORCHRUN, *node_command(endpoint, f"ddplab-{endpoint.rsplit(':', 1)[1]}")[1:],
               "-m", "ddplab", *arguments]
    # Two "nodes" share this machine's cores: one thread per rank, as torchrun itself sets
    # (OMP_NUM_THREADS=1, in LOOPBACK_ENV) when it starts several processes on a node, not for
    # one per node. Without it the quick report as two nodes took 93 s here, with it 43 s
    # (load average about 11 both times: two ranks of two threads each on two cores).
    env = {**os.environ, **LOOPBACK_ENV}
    # Each agent in a session of its own: on a timeout its whole tree is ended at once.
    return [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, env=env) for _ in range(2)]


def end(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def differences(a, b, path="") -> list[str]:
    """Where two JSON values differ: exactly for text and shapes, within TOLERANCE for numbers."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return sum((differences(a[k], b[k], f"{path}.{k}") for k in a), [])
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} and {len(b)}"]
        try:  # an array of numbers: one message with its largest difference
            x, y = np.array(a, dtype=float), np.array(b, dtype=float)
        except (ValueError, TypeError):  # text, or ragged (parameter shapes)
            return sum((differences(u, v, f"{path}[{i}]") for i, (u, v) in
                        enumerate(zip(a, b))), [])
        if x.shape != y.shape:
            return [f"{path}: shapes {x.shape} and {y.shape}"]
        diff = float(np.abs(x - y).max()) if x.size else 0.0
        return [] if diff <= TOLERANCE else [f"{path}: largest difference {diff:.2e}"]
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
            not isinstance(a, bool) and not isinstance(b, bool):
        return [] if abs(a - b) <= TOLERANCE else [f"{path}: {a} and {b}"]
    return [] if a == b else [f"{path}: {a!r} and {b!r}"]


def run_nodes(arguments, timeout: float):
    """Two agents running ``python -m ddplab ARGUMENTS``: (exit codes, [(stdout, stderr)],
    seconds), or None on the timeout. Every process started is ended either way."""
    start = time.perf_counter()
    with rendezvous_on_loopback() as endpoint:
        nodes = agents(endpoint, arguments)
        try:
            outputs = []
            for node in nodes:
                left = max(timeout - (time.perf_counter() - start), 1.0)
                outputs.append(node.communicate(timeout=left))
        except subprocess.TimeoutExpired:
            print(f"two nodes: no result within {timeout:g} s")
            return None
        finally:
            for node in nodes:
                end(node)
    return [node.returncode for node in nodes], outputs, time.perf_counter() - start


def one_result(ran) -> str | None:
    """The one node's printed output, or None (reported) on an error or a second printer."""
    if ran is None:
        return None
    codes, outputs, _ = ran
    printed = [out for out, _ in outputs if out.strip()]
    if codes != [0, 0] or len(printed) != 1:
        print(f"two nodes: exit codes {codes}, {len(printed)} printed a result")
        for i, (out, err) in enumerate(outputs):
            print(f"--- node {i} stdout\n{out[-2000:]}\n--- node {i} stderr\n{err[-3000:]}")
        return None
    return printed[0]


def report_as_two_nodes(out: str, timeout: float) -> int:
    """``ddplab report --quick`` as two torchrun nodes: both files written, the JSON whole."""
    from ddplab.report import schema

    ran = run_nodes(["report", "--quick", "--out", out, "--json"], timeout)
    printed = one_result(ran)
    if printed is None:
        return 1
    data = json.loads(printed)
    written = [name for name in ("report.json", "report.html")
               if os.path.isfile(os.path.join(out, name))]
    found = schema.problems(data)
    print(f"report as two torchrun nodes in {ran[2]:.1f} s: world size "
          f"{data['machine']['world_size']}, files {written}, JSON problems: {found or 'none'}")
    return 0 if not found and len(written) == 2 and data["machine"]["world_size"] == 2 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--report-out", default="_build/report-two-nodes")
    args = parser.parse_args()
    ran = run_nodes(EXPERIMENT, args.timeout)
    printed = one_result(ran)
    if printed is None:
        return 1
    two_nodes_s = ran[2]
    remote = json.loads(printed)
    local = json.loads(subprocess.run(
        [sys.executable, "-m", "ddplab", *EXPERIMENT, "--world-size", "2"], check=True,
        capture_output=True, text=True, timeout=args.timeout).stdout)
    found = differences(remote, local)
    print(f"two torchrun nodes x 1 process: world size {remote['world_size']}, "
          f"{len(remote['ddp_grads'])} ranks' gradients, in {two_nodes_s:.1f} s")
    print(f"local pool, world size 2: {len(found)} field(s) differ "
          f"(numbers within {TOLERANCE:g}): {found or 'none'}")
    if found or remote["world_size"] != 2:
        return 1
    return report_as_two_nodes(args.report_out, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
