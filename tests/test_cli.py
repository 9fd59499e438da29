"""`python -m ddplab check` on the local pool and under torchrun: the same rank function."""

import json
import os
import shutil
import subprocess
import sys

import pytest

KEYS = {"rank", "local_rank", "world_size", "backend", "device", "host", "pid", "rank_sum"}


def run_cli(args, timeout=120):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def test_check_on_the_local_pool_prints_every_rank_and_the_sum():
    done = run_cli([sys.executable, "-m", "ddplab", "check", "--world-size", "3", "--json"])
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["world_size"] == 3 and report["expected_rank_sum"] == 3
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2]
    assert all(set(r) == KEYS and r["rank_sum"] == 3 for r in report["ranks"])
    text = run_cli([sys.executable, "-m", "ddplab", "check", "--world-size", "2"])
    assert text.returncode == 0
    assert "expected 2*1/2 = 1 on every rank: OK" in text.stdout


def test_check_under_torchrun_reports_the_same_fields():
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if torchrun is None:
        pytest.skip("torchrun is not installed beside this python")
    done = run_cli([torchrun, "--standalone", "--nproc-per-node", "2", "-m", "ddplab", "check",
                    "--json"])
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # printed once, by rank 0
    assert report["ok"] and report["world_size"] == 2
    assert all(set(r) == KEYS and r["rank_sum"] == 1 for r in report["ranks"])
    assert len({r["pid"] for r in report["ranks"]}) == 2


@pytest.mark.parametrize("args, match", [
    (["--world-size", "0"], "world_size must be an int from 1 to 64"),
    (["--world-size", "65"], "world_size must be an int from 1 to 64"),
    (["--backend", "mpi"], "invalid choice"),
])
def test_bad_arguments_are_usage_errors(args, match):
    done = run_cli([sys.executable, "-m", "ddplab", "check", *args])
    assert done.returncode == 2
    assert match in done.stderr and "Traceback" not in done.stderr
