"""The lab engine against real gloo process groups on CPU ranks: results, reuse, failures."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import torch

import ddplab
import rank_fns
from conftest import alive, descendants
from ddplab.chapters.running import first_group as check


def test_the_pool_is_reused_across_calls_and_world_sizes():
    pids4 = [r["pid"] for r in ddplab.run(rank_fns.identify, 4)]
    assert [r["pid"] for r in ddplab.run(rank_fns.identify, 4)] == pids4
    small = ddplab.run(rank_fns.identify, 2)
    assert [r["pid"] for r in small] == pids4[:2] and small[0]["world_size"] == 2
    again = ddplab.run(check.report, 4)  # the group re-formed at 4 still works
    assert [r["pid"] for r in again] == pids4 and again[0]["rank_sum"] == 6


def test_moving_between_world_sizes_reuses_each_sizes_group():
    """A size served before gets its own group object back in the same processes, and groups
    formed inside calls keep working on every size: a subgroup name two kept groups shared,
    or that the members of one group disagreed on, would raise or hang."""
    seen = {}
    for world_size in (4, 2, 3, 2, 4, 3, 4):
        results = ddplab.run(rank_fns.group_and_subgroup, world_size)
        assert [r["sum"] for r in results] == [world_size * (world_size + 1) // 2] * world_size
        assert {r["world_size"] for r in results} == {world_size}
        assert len({r["subgroup"] for r in results}) == 1  # every member named it alike
        kept = [(r["pid"], r["world"]) for r in results]
        assert seen.setdefault(world_size, kept) == kept, f"world size {world_size} re-formed"
    assert len({pid for pid, _ in seen[4]}) == 4


def test_results_are_plain_data_with_tensors_turned_into_numpy():
    results = ddplab.run(rank_fns.tensors, 2)
    assert isinstance(results[1]["scaled"], np.ndarray)
    np.testing.assert_array_equal(results[1]["scaled"], [0.0, 1.0, 2.0])
    assert isinstance(results[0]["nested"][0], np.ndarray)


def test_cluster_has_its_own_processes_and_leaves_none_behind():
    with ddplab.placed(backend="gloo"), ddplab.Cluster(world_size=3) as cluster:
        assert cluster.backend == "gloo"
        first = cluster.run(rank_fns.identify)
        assert [r["rank"] for r in first] == [0, 1, 2]
        assert [r["pid"] for r in cluster.run(rank_fns.identify)] == [r["pid"] for r in first]
        shared = {r["pid"] for r in ddplab.run(rank_fns.identify, 3)}
        assert shared.isdisjoint(r["pid"] for r in first)
    assert not any(alive(r["pid"]) for r in first)
    with pytest.raises(RuntimeError, match="closed"):
        cluster.run(rank_fns.identify)


def test_a_rank_that_raises_names_the_rank_with_its_traceback_and_the_pool_recovers():
    start = time.monotonic()
    with pytest.raises(ddplab.RankError) as info:
        ddplab.run(rank_fns.raise_on, 3, rank=2)
    assert time.monotonic() - start < 20  # surfaced at once, not at the 60 s timeout
    assert info.value.rank == 2
    message = str(info.value)
    assert "rank 2" in message and "ValueError: boom on rank 2" in message
    assert "raise_on" in info.value.remote_traceback  # the rank's own traceback
    assert ddplab.run(check.report, 3)[0]["rank_sum"] == 3


def test_a_rank_that_dies_is_reported_and_the_pool_recovers():
    before = [r["pid"] for r in ddplab.run(rank_fns.identify, 3)]
    with pytest.raises(ddplab.RankError, match="rank 1 .*killed by SIGKILL") as info:
        ddplab.run(rank_fns.die_on, 3, rank=1, timeout=30)
    assert info.value.rank == 1
    assert not any(alive(pid) for pid in before)  # the broken group's processes are gone
    after = ddplab.run(rank_fns.identify, 3)
    assert set(r["pid"] for r in after).isdisjoint(before)


def test_after_a_failure_fresh_ranks_are_started_before_the_next_call():
    from ddplab.engine import pool

    shared = pool.shared()
    size = max(3, len(shared.pids()))  # as many as the pool had (it grows, never shrinks)
    with pytest.raises(ddplab.RankError):
        ddplab.run(rank_fns.raise_on, 3, rank=0)
    deadline = time.monotonic() + 60
    while len(shared.pids()) < size and time.monotonic() < deadline:  # started in a thread
        time.sleep(0.05)
    started = shared.pids()
    assert len(started) == size and all(alive(pid) for pid in started)
    assert [r["pid"] for r in ddplab.run(rank_fns.identify, 3)] == started[:3]


def test_a_hung_rank_times_out_and_the_pool_recovers():
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"rank\(s\) \[0, 1\] had not answered after 2 s"):
        ddplab.run(rank_fns.sleep, 2, seconds=600, timeout=2)
    assert time.monotonic() - start < 15
    assert ddplab.run(check.report, 2)[1]["rank_sum"] == 1


def not_importable(ctx):
    return 0


not_importable.__qualname__ = "renamed_away"


def in_a_cell(source: str) -> dict:
    """The names a notebook cell defines: run in a namespace of its own named ``__main__``, as
    a kernel runs a cell, so its functions have ``__module__ == "__main__"`` and no rank can
    import them."""
    namespace = {"__name__": "__main__"}
    exec(compile(textwrap.dedent(source), "<cell>", "exec"), namespace)
    return namespace


def test_a_cell_function_runs_on_the_ranks_with_its_helper_and_constant():
    cell = in_a_cell("""
        import torch
        import torch.distributed as dist

        SCALE = 10

        def doubled(x):
            return 2 * x

        def rank_sum(ctx, extra):
            t = torch.tensor([float(doubled(ctx.rank) * SCALE + extra)])
            dist.all_reduce(t)
            return t.item()
        """)
    assert cell["rank_sum"].__module__ == "__main__"
    # ranks 0..2: 2 * rank * 10 + 1 each, summed: (0 + 20 + 40) + 3
    assert ddplab.run(cell["rank_sum"], 3, extra=1) == [63.0] * 3
    cell["SCALE"] = 100  # a cell run again: the next call ships the new value
    assert ddplab.run(cell["rank_sum"], 3, extra=0) == [600.0] * 3


def test_lambdas_nested_and_renamed_functions_are_shipped_by_value():
    def nested(ctx, k):
        return ctx.rank * k
    assert ddplab.run(nested, 2, k=5) == [0, 5]
    assert ddplab.run(lambda ctx: ctx.world_size, 2) == [2, 2]
    assert ddplab.run(not_importable, 2) == [0, 0]


def test_cell_classes_run_as_a_model_and_as_a_parameter():
    cell = in_a_cell("""
        import torch

        class Tiny(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.ones(3))

            def forward(self, x):
                return (self.w * x).sum()

        def grad_of(ctx, model_class):
            model = model_class()
            model(torch.full((3,), float(ctx.rank + 1))).backward()
            return model.w.grad
        """)
    results = ddplab.run(cell["grad_of"], 2, model_class=cell["Tiny"])
    np.testing.assert_array_equal(results[1], [2.0, 2.0, 2.0])


def test_a_script_read_from_standard_input_runs_its_own_function(python_env):
    script = textwrap.dedent("""
        import ddplab

        WORDS = ["zero", "one"]

        def word(ctx):
            return WORDS[ctx.rank]

        print(ddplab.run(word, 2))
        """)
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True,
                          text=True, timeout=120, env=python_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['zero', 'one']"


def test_a_lock_in_the_closure_fails_in_the_caller_naming_it(tmp_path):
    import threading

    guard = threading.Lock()

    def locked(ctx):
        with guard:
            return ctx.rank
    before = descendants()
    with pytest.raises(TypeError, match=r"closure.*'guard'.*lock.*cannot be pickled"):
        ddplab.run(locked, 2)
    assert descendants() == before  # raised before any rank process was started
    with open(tmp_path / "log.txt", "w") as handle:  # cloudpickle sends files read-only
        with pytest.raises(TypeError, match=r"parameter 'rank'.*TextIOWrapper"):
            ddplab.run(rank_fns.raise_on, 2, rank=handle)


@pytest.mark.parametrize("world_size", [0, -1, 65, 2.0, "4", True, None])
def test_bad_world_size_fails_before_any_process_starts(world_size):
    before = descendants()
    with pytest.raises(ValueError, match="world_size must be an int from 1 to 64"):
        ddplab.run(check.report, world_size)
    with pytest.raises(ValueError, match="world_size must be an int"):
        ddplab.Cluster(world_size)
    assert descendants() == before


@pytest.mark.parametrize("fn, params, error, match", [
    (check.report, {"unexpected": 1}, TypeError, "does not take these parameters"),
    (check.ddp_step, {"seed": threading.Lock()}, TypeError, "'seed' is a lock"),
    ("check.report", {}, TypeError, "must be a function"),
])
def test_bad_fn_or_params_fail_before_any_process_starts(fn, params, error, match):
    before = descendants()
    with pytest.raises(error, match=match):
        ddplab.run(fn, 2, **params)
    assert descendants() == before


def test_unknown_backend_and_nccl_without_gpus_are_clear_errors():
    before = descendants()
    with pytest.raises(ValueError, match="backend must be one of auto, gloo, nccl"):
        ddplab.placed(backend="mpi")
    with pytest.raises(ValueError, match="device must be one of"):
        ddplab.placed(device="CUDA")
    assert descendants() == before
    if torch.cuda.device_count() < 2:
        with ddplab.placed(backend="nccl"):
            with pytest.raises(ValueError, match="'nccl' needs one GPU per rank"):
                ddplab.run(check.report, 2)
            with pytest.raises(ValueError, match="'nccl' needs one GPU per rank"):
                ddplab.Cluster(2)
    assert descendants() == before


def test_ranks_never_print_and_their_output_is_readable_from_the_caller(capfd):
    capfd.readouterr()
    ddplab.run(rank_fns.chatty, 2)
    out, err = capfd.readouterr()
    assert "rank" not in out + err
    logs = ddplab.logs()
    for rank in (0, 1):
        assert f"print from rank {rank}" in logs[rank]
        assert f"warning from rank {rank}" in logs[rank]
        assert f"raw fd 2 write from rank {rank}" in logs[rank]


def test_every_listening_socket_is_on_loopback():
    import psutil

    per_rank = ddplab.run(rank_fns.listening_sockets, 3)
    assert all(per_rank), "each rank of a live gloo group listens for its peers"
    pool = [psutil.Process()] + psutil.Process().children(recursive=True)
    listening = [(p.pid, c.laddr) for p in pool for c in rank_fns.inet_connections(p)
                 if c.status == psutil.CONN_LISTEN]
    assert listening  # at least the store
    assert all(addr.ip in ("127.0.0.1", "::1") for _, addr in listening), listening


def test_nothing_outlives_the_interpreter(python_env):
    script = textwrap.dedent("""
        import multiprocessing.forkserver as fs, os
        import ddplab, rank_fns
        if __name__ == "__main__":
            pids = [r["pid"] for r in ddplab.run(rank_fns.identify, 3)]
            with ddplab.Cluster(2) as cluster:
                pids += [r["pid"] for r in cluster.run(rank_fns.identify)]
            leftover = ddplab.Cluster(2)  # never closed: interpreter exit must end it too
            pids += [r["pid"] for r in leftover.run(rank_fns.identify)]
            print(" ".join(map(str, pids + [fs._forkserver._forkserver_pid])))
    """)
    done = subprocess.run([sys.executable, "-c", script], env=python_env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 3 + 2 + 2 + 1
    time.sleep(0.5)
    assert [p for p in pids if alive(p)] == []


def test_a_script_without_main_guard_gets_a_clear_error_and_leaves_nothing(tmp_path,
                                                                           python_env):
    script = tmp_path / "unguarded.py"
    script.write_text("import ddplab, rank_fns\nprint(ddplab.run(rank_fns.identify, 2))\n")
    done = subprocess.run([sys.executable, str(script)], env=python_env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    assert 'if __name__ == "__main__":' in done.stderr
    assert "RankError" in done.stderr  # the caller's own error, not only the children's


def test_a_killed_caller_leaves_no_rank_behind(python_env):
    script = textwrap.dedent("""
        import multiprocessing.forkserver as fs, time
        import ddplab, rank_fns
        pids = [r["pid"] for r in ddplab.run(rank_fns.identify, 3)]
        print(" ".join(map(str, pids + [fs._forkserver._forkserver_pid])), flush=True)
        time.sleep(600)
    """)
    caller = subprocess.Popen([sys.executable, "-c", script], env=python_env,
                              stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in caller.stdout.readline().split()]
    assert len(pids) == 4 and all(alive(p) for p in pids)
    caller.kill()  # SIGKILL: no atexit, no cleanup of its own
    caller.wait()
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in pids if alive(p)] == []


def test_a_rank_killed_between_calls_is_replaced_without_an_error():
    import signal

    import psutil

    before = [r["pid"] for r in ddplab.run(rank_fns.identify, 3)]
    os.kill(before[1], signal.SIGKILL)
    # Wait until it is reaped: a rank is multi-threaded (gloo), and psutil reports its main
    # thread a zombie while the other threads, still holding its pipe, are exiting.
    deadline = time.monotonic() + 10
    while psutil.pid_exists(before[1]) and time.monotonic() < deadline:
        time.sleep(0.05)
    after = ddplab.run(check.report, 3)
    assert after[2]["rank_sum"] == 3
    assert {r["pid"] for r in after}.isdisjoint(before)


def test_a_failed_ranks_log_can_be_read_after_the_failure():
    with pytest.raises(ddplab.RankError):
        ddplab.run(rank_fns.raise_on, 2, rank=1)
    logs = ddplab.logs()
    assert len(logs) >= 2 and "ValueError: boom on rank 1" in logs[1]


def test_the_caller_never_loads_the_rank_side(tmp_path):
    """The caller speaks to ranks in engine.messages' types; it must not import ddplab.engine.rank
    (or dynamo, which that module preloads for the ranks) to do so."""
    code = textwrap.dedent("""
        import sys
        import ddplab, rank_fns
        assert ddplab.run(rank_fns.identify, 2)[1]["rank"] == 1
        print(sorted(m for m in ("ddplab.engine.rank", "torch._dynamo") if m in sys.modules))
    """)
    here = __import__("conftest").HERE  # rank_fns' folder, on the path; the run's is tmp_path
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env=env, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_a_killed_callers_log_folder_is_removed_by_the_next_pool(tmp_path):
    """A caller killed with SIGKILL cannot remove its rank logs; the next pool does, and
    leaves the folders of callers that are alive."""
    import tempfile

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid now names no process (reused pids are left alone: then alive)
    stale = tempfile.mkdtemp(prefix=f"ddplab-logs-{gone.pid}-")
    mine = tempfile.mkdtemp(prefix=f"ddplab-logs-{os.getpid()}-")
    try:
        with ddplab.Cluster(world_size=1) as cluster:
            cluster.run(rank_fns.identify)
        assert not os.path.exists(stale) and os.path.isdir(mine)
    finally:
        for path in (stale, mine):
            if os.path.isdir(path):
                os.rmdir(path)


def test_importing_ddplab_starts_nothing_and_placed_starts_the_forkserver(tmp_path):
    """``import ddplab`` starts no process (a tool that imports it, the doctor, pays nothing);
    a notebook's first cell, ``ddplab.placed(...)``, starts the forkserver, whose torch import
    then overlaps the cells before the first run."""
    code = textwrap.dedent("""
        import psutil
        import ddplab
        def started():
            return [" ".join(p.cmdline()) for p in psutil.Process().children()]
        print(len(started()))
        ddplab.placed(largest_world_size=2)
        print(sum("forkserver import main" in c for c in started()))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, check=True).stdout
    assert out.split() == ["0", "1"]
