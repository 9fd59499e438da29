import os
import sys

import psutil
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


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
