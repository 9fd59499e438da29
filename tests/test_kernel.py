"""The pool driven from a real Jupyter kernel: interrupts, notebook-cell functions, output."""

import os
import time

import pytest

from conftest import HERE

jupyter_client = pytest.importorskip("jupyter_client")


@pytest.fixture(scope="module")
def kernel():
    manager = jupyter_client.KernelManager(kernel_name="python3")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    manager.start_kernel(cwd=HERE, env=env)
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    yield manager, client
    client.stop_channels()
    manager.shutdown_kernel(now=False)


def execute(client, code, timeout=120):
    """Run a cell; return (text output, error name or None)."""
    msg_id = client.execute(code)
    text, error = [], None
    while True:
        msg = client.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            text.append(content["text"])
        elif kind in ("execute_result", "display_data"):
            text.append(content["data"].get("text/plain", ""))
        elif kind == "error":
            error = content["ename"]
            text.append(content["evalue"])
        elif kind == "status" and content["execution_state"] == "idle":
            return "".join(text), error


def test_rank_output_never_reaches_the_cell(kernel):
    _, client = kernel
    out, error = execute(client, "import ddplab, rank_fns\nprint(ddplab.run(rank_fns.chatty, 2))")
    assert error is None, out
    assert out.strip() == "[0, 1]"  # no print, warning or raw fd write from the ranks
    out, error = execute(client, "print('print from rank 1' in ddplab.logs()[1])")
    assert out.strip() == "True"


def test_a_function_defined_in_a_cell_runs_on_the_pool(kernel):
    _, client = kernel
    out, error = execute(client, "import torch, torch.distributed as dist\n"
                                 "OFFSET = 5\n"
                                 "def plus(x):\n    return x + OFFSET\n")
    assert error is None, out
    out, error = execute(client, "def in_a_cell(ctx):\n"
                                 "    t = torch.tensor([float(plus(ctx.rank))])\n"
                                 "    dist.all_reduce(t)\n"
                                 "    return t.item()\n"
                                 "print(ddplab.run(in_a_cell, 2))")
    assert error is None, out
    assert out.strip() == "[11.0, 11.0]"  # (0 + 5) + (1 + 5), summed over the two ranks
    out, error = execute(client, "import threading\nlock = threading.Lock()\n"
                                 "def locked(ctx):\n    with lock:\n        return 0\n"
                                 "ddplab.run(locked, 2)")
    assert error == "TypeError" and "'lock'" in out and "cannot be pickled" in out


def test_an_interrupt_ends_the_cell_and_the_pool_recovers(kernel):
    manager, client = kernel
    # stop_on_error=False: otherwise ipykernel itself drops the next cell sent right after an
    # error, which would hide whether the pool recovered.
    msg_id = client.execute("ddplab.run(rank_fns.sleep, 3, seconds=600)", stop_on_error=False)
    time.sleep(3)  # the ranks are asleep in the call
    start = time.monotonic()
    manager.interrupt_kernel()
    errors = []
    while True:
        msg = client.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "error":
            errors.append(msg["content"]["ename"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    assert errors == ["KeyboardInterrupt"]
    assert time.monotonic() - start < 10
    out, error = execute(client, "print(ddplab.run(rank_fns.identify, 3)[2]['rank'])")
    assert error is None and out.strip() == "2"
