import contextlib
import io
import json
import os
import subprocess
import sys

import psutil
import pytest

from ddplab import chapters
from ddplab.__main__ import main

HERE = os.path.dirname(os.path.abspath(__file__))
# torch installs torchrun beside the python that has it; its absence is a broken install.
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")


def ddplab_cli(experiment: str, *args: str, torchrun: int = 0, timeout: float = 300):
    """``python -m ddplab EXPERIMENT ARGS``, or the same under torchrun with that many
    processes on this machine; returns the finished process."""
    assert os.path.exists(TORCHRUN), f"torchrun missing beside {sys.executable}"
    launcher = ([TORCHRUN, "--standalone", "--nproc-per-node", str(torchrun), "-m"] if torchrun
                else [sys.executable, "-m"])
    return subprocess.run([*launcher, "ddplab", experiment, *args], capture_output=True,
                          text=True, timeout=timeout)


# The commands tests compare under torchrun (2 processes) with the local pool, run in one
# torchrun launch (tests/torchrun_batch.py) the first time a test asks for any of them; a call
# not listed here starts a torchrun of its own.
TORCHRUN_BATCH = [
    ("averaging", "--batch-size", "4", "--seed", "3"),
    ("buckets", "--layers", "8,64,32,4", "--bucket-cap-mb", str(8000 / 2 ** 20),
     "--iterations", "2"),
    ("check",),
    ("lr-scaling", "--batch-size", "4", "--lr", "0.15", "--rule", "linear", "--steps", "6"),
    ("memory", "--strategy", "fsdp", "--optimizer", "adam", "--params-millions", "0.3"),
    ("sharding", "--dataset-size", "9", "--batch-size", "2", "--epochs", "2", "--shuffle"),
    ("accumulate", "--batch-size", "4", "--micro-batches", "3", "--seed", "5",
     "--layers", "8,64,32,4"),
    ("gather-metric", "--dataset-size", "9"),
]


def torchrun_batch() -> dict:
    """What each command of :data:`TORCHRUN_BATCH` printed on rank 0 (checked: exit 0 on every
    rank, nothing printed by rank 1), by its arguments joined by spaces. One launch for the
    whole test run: the pytest-xdist workers share it through a file lock in a folder named
    after the run."""
    import fcntl

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", str(os.getpid()))
    folder = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ddplab-torchrun-{run}")
    os.makedirs(folder, exist_ok=True)
    commands = [[*command, "--json"] for command in TORCHRUN_BATCH]
    prefix = os.path.join(folder, "printed")
    with open(os.path.join(folder, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker launches, the others wait and read
        if not os.path.exists(f"{prefix}.rank1.json"):
            done = subprocess.run([TORCHRUN, "--standalone", "--nproc-per-node", "2",
                                   os.path.join(HERE, "torchrun_batch.py"),
                                   json.dumps(commands), prefix],
                                  capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr
    ranks = []
    for rank in (0, 1):
        with open(f"{prefix}.rank{rank}.json") as f:
            ranks.append(json.load(f))
    for key, printed in ranks[1].items():
        assert printed["code"] == ranks[0][key]["code"] == 0, key
        assert printed["stdout"] == "", f"rank 1 printed for {key}: {printed['stdout']!r}"
    return {key: printed["stdout"] for key, printed in ranks[0].items()}


def ddplab_json(experiment: str, *args: str, torchrun: int = 0) -> dict:
    """The JSON that ``python -m ddplab EXPERIMENT ARGS --json`` prints, checked: exit 0,
    nothing on stderr (torchrun writes notices of its own there, so only without torchrun),
    and, for a chapter's command, where its ranks ran first (``backend``, ``device``: every
    result records its placement). Without torchrun the command's own ``main`` runs in this
    process, on its warm pool: a new interpreter would spend 3-4 s importing torch and starting
    ranks for each of these tests (``test_cli.py`` runs the ``python -m ddplab`` entry point
    itself)."""
    if torchrun == 2 and (experiment, *args) in TORCHRUN_BATCH:
        return placed(experiment, json.loads(torchrun_batch()[" ".join([experiment, *args,
                                                                       "--json"])]))
    if torchrun:
        done = ddplab_cli(experiment, *args, "--json", torchrun=torchrun)
        assert done.returncode == 0, done.stderr
        return placed(experiment, json.loads(done.stdout))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([experiment, *args, "--json"])
    assert code == 0, err.getvalue()
    assert err.getvalue() == "", err.getvalue()
    return placed(experiment, json.loads(out.getvalue()))


def placed(experiment: str, data: dict) -> dict:
    """``data``, checked: a chapter's command names where its ranks ran, first."""
    if experiment in chapters.commands():
        assert list(data)[:2] == ["backend", "device"], f"{experiment}: {list(data)[:4]}"
        assert data["backend"] in ("gloo", "nccl") and data["device"] in ("cpu", "cuda")
    return data


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` are skipped where no GPU is visible (CI); nothing else assumes
    either kind of machine. ``device_count`` asks NVML and does not initialise CUDA here."""
    import torch

    if torch.cuda.device_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


def descendants() -> set[int]:
    """Pids of every live process below this one (forkserver, ranks)."""
    return {p.pid for p in psutil.Process().children(recursive=True)
            if p.status() != psutil.STATUS_ZOMBIE}


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def python_env():
    """Environment for child interpreters that must import ddplab and the tests' rank_fns."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE] + sys.path)
    return env
