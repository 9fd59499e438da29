"""`python -m ddplab check` on the local pool and under torchrun: the same rank function."""

import pytest

from conftest import ddplab_cli, ddplab_json

KEYS = {"rank", "local_rank", "world_size", "backend", "device", "host", "pid", "rank_sum"}


def test_check_on_the_local_pool_prints_every_rank_and_the_sum():
    report = ddplab_json("check", "--world-size", "3")
    assert report["ok"] and report["world_size"] == 3 and report["expected_rank_sum"] == 3
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2]
    assert all(set(r) == KEYS and r["rank_sum"] == 3 for r in report["ranks"])
    text = ddplab_cli("check", "--world-size", "2")  # the entry point itself, a new interpreter
    assert text.returncode == 0 and text.stderr == "", text.stderr
    assert "expected 2*1/2 = 1 on every rank: OK" in text.stdout


def test_check_under_torchrun_reports_the_same_fields():
    report = ddplab_json("check", torchrun=2)  # printed once, by rank 0
    assert report["ok"] and report["world_size"] == 2
    assert all(set(r) == KEYS and r["rank_sum"] == 1 for r in report["ranks"])
    assert len({r["pid"] for r in report["ranks"]}) == 2


@pytest.mark.parametrize("args, match", [
    (["--world-size", "0"], "world_size must be an int from 1 to 64"),
    (["--world-size", "65"], "world_size must be an int from 1 to 64"),
    (["--backend", "mpi"], "invalid choice"),
])
def test_bad_arguments_are_usage_errors(args, match):
    done = ddplab_cli("check", *args)
    assert done.returncode == 2
    assert match in done.stderr and "Traceback" not in done.stderr
