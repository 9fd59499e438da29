"""Computed ahead (``screen.ahead``): a panel's neighbouring values run in a thread of the
caller, on the real shared pool, and a move there shows the kept run; the reader's own calls
go first. Outside a kernel nothing runs ahead, so each test starts an owner of its own."""

import os
import threading
import time

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import ddplab  # noqa: E402
import rank_fns  # noqa: E402
from ddplab.chapters.averaging import averaging, plots  # noqa: E402
from ddplab.common.results import to_json  # noqa: E402
from ddplab.engine.placement import Placement  # noqa: E402
from ddplab.screen import ahead, widgets  # noqa: E402
from ddplab.screen.run_ahead import Entry, Kept, RunAhead, key_of  # noqa: E402


@pytest.fixture
def owner(monkeypatch):
    started = RunAhead(quiet=0.05)
    monkeypatch.setattr(ahead, "_owner", started)
    yield started
    started.close()
    assert not started.alive()  # no thread left behind


def settle(owner, timeout=180.0):
    """Wait (not a timed assertion: a bound on a hang) until nothing is left to run ahead."""
    deadline = time.monotonic() + timeout
    while not owner.settled():
        assert time.monotonic() < deadline, "the owner never settled"
        time.sleep(0.05)


def until(condition, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.01)


def test_a_kept_neighbour_is_a_real_run_of_exactly_those_values_and_is_shown_at_once(owner):
    panel = widgets.explore(averaging.run, plots.gradients, world_size=(1, 4),
                            batch_size=(1, 8), reduction=["mean", "sum"])
    controls, note, status, image = panel.children[0], *panel.children[-3:]
    assert "run ahead" in note.value
    settle(owner)
    computed = panel.computed
    world_size, batch_size, _ = controls.children
    expected = [(3, 8), (4, 7)]  # world size 4 and batch size 8 stand at their maxima
    neighbours = [(v["world_size"], v["batch_size"]) for v in computed.neighbours()]
    assert neighbours == expected
    for values in computed.neighbours():
        entry = computed.kept.get(computed.key(values))
        assert entry is not None and entry.ahead and entry.png.startswith(b"\x89PNG")
        fresh = averaging.run(**values)
        assert to_json(entry.result) == to_json(fresh)  # the same run, not a neighbour's
    assert to_json(computed.kept.get(computed.key({"world_size": 3, "batch_size": 8,
                                                   "reduction": "mean"})).result) \
        != to_json(averaging.run(world_size=4, batch_size=8))  # the comparison can fail
    runs = owner.started
    world_size.value = 3
    shown = computed.kept.get(computed.key(computed.values()))
    assert bytes(image.value) == shown.png and "run ahead while you read" in status.value
    assert status.value.endswith(f", {ddplab.placement()}")  # where it ran, as a run says
    assert owner.started == runs  # shown, not run again


def logged_sweep(log, seconds=0.4, calls=3):
    """A panel's run of ``calls`` real calls, each noted in ``log`` by thread as it starts
    and ends."""

    def run(x=5):
        name = threading.current_thread().name
        for i in range(calls + 1):
            log.append(("start", name, x, i))  # noted before the call, which may give way
            if i < calls:
                ddplab.run(rank_fns.sleep, 2, seconds=seconds)
            else:
                result = averaging.run(world_size=2, seed=x)
            log.append(("end", name, x, i))
        return result

    return run


def test_the_readers_call_waits_behind_one_call_run_ahead_at_most(owner):
    log = []
    panel = widgets.explore(logged_sweep(log), plots.gradients, x=(0, 10))
    (slider,) = panel.children[0].children
    until(lambda: any(e[0] == "start" and e[1] == "ddplab-ahead" for e in log))
    asked = len(log)
    slider.value = 9  # not a neighbour: the reader's run
    mine = [i for i, e in enumerate(log) if e[1] != "ddplab-ahead" and i >= asked]
    ended = [e for e in log[asked:mine[0]] if e[1] == "ddplab-ahead" and e[0] == "end"]
    assert len(ended) <= 1, log  # the call under way, if any, and no other
    assert all(e[1] != "ddplab-ahead" for e in log[mine[0]:]), log  # then the reader alone
    assert [e[2] for e in log[mine[0]:]] == [9] * 8


def ended_ahead(log, x=None) -> int:
    return sum(e[0] == "end" and e[1] == "ddplab-ahead" and x in (None, e[2]) for e in log)


def test_a_sweep_run_ahead_stops_between_its_calls_once_it_is_no_neighbour(owner):
    log = []
    panel = widgets.explore(logged_sweep(log, seconds=0.5), plots.gradients, x=(0, 10))
    (slider,) = panel.children[0].children
    settle(owner)  # 4 and 6 kept, 5 the reader's
    slider.value = 3  # ran by the reader; 2 is run ahead first (the move went down)
    until(lambda: ("start", "ddplab-ahead", 2, 0) in log)
    slider.value = 4  # kept: 2 is no neighbour now
    settle(owner)
    assert ended_ahead(log, 2) <= 1, log  # stopped after the call under way
    computed = panel.computed
    assert computed.key({"x": 2}) not in computed.kept
    assert computed.key({"x": 5}) in computed.kept and computed.key({"x": 3}) in computed.kept


def test_a_move_to_the_value_under_way_waits_for_it_rather_than_running_it_again(owner):
    log = []
    panel = widgets.explore(logged_sweep(log, seconds=0.5), plots.gradients, x=(0, 10))
    (slider,) = panel.children[0].children
    status = panel.children[-2]
    seen = []
    status.observe(lambda change: seen.append(change["new"]), names="value")
    until(lambda: ("start", "ddplab-ahead", 6, 0) in log)  # up first
    slider.value = 6
    assert not any(e[1] != "ddplab-ahead" and e[2] == 6 for e in log), log
    assert "started ahead" in seen[0] and "run ahead while you read" in status.value


def test_a_cell_pauses_the_thread_after_its_call(owner):
    log = []
    widgets.explore(logged_sweep(log, seconds=0.3), plots.gradients, x=(0, 10))
    until(lambda: any(e[1] == "ddplab-ahead" for e in log))
    owner.cell_starts()  # returns once the call under way has ended
    ended = ended_ahead(log)
    time.sleep(0.5)  # ten times the owner's quiet time
    assert ended_ahead(log) == ended
    owner.cell_ends()
    settle(owner)
    assert ended_ahead(log) > ended


def test_a_panel_that_may_hang_on_purpose_is_never_run_ahead(owner):
    seen = []

    def run(world_size=2, timeout=3.0):
        seen.append(world_size)
        return averaging.run(world_size=world_size, timeout=timeout)

    panel = widgets.explore(run, plots.gradients, world_size=(1, 4), timeout=[3.0])
    assert ahead.NOTE not in [getattr(w, "value", None) for w in panel.children]  # no note
    slider = panel.children[0].children[0]
    slider.value = 3
    time.sleep(0.5)  # ten times the owner's quiet time
    slider.value = 2  # run again: its results are not kept either
    assert seen == [2, 3, 2] and owner.started == 0


def test_a_panel_keeps_its_newest_results_only():
    kept = Kept(size=64)
    for i in range(70):
        kept.put(i, Entry(i, b"", 0.0, 0.0, ahead=True))
    assert len(kept) == 64 and 5 not in kept and 6 in kept
    kept.get(6)  # shown again: the newest
    kept.put(70, Entry(70, b"", 0.0, 0.0, ahead=True))
    assert 6 in kept and 7 not in kept


def test_the_key_holds_every_value_and_tells_their_types_apart():
    assert key_of({"a": 1, "b": None}) != key_of({"a": True, "b": None})
    assert key_of({"a": [1, 2]}) == key_of({"a": [1, 2]})  # unhashable: by its repr
    here, there = Placement("gloo", "cpu"), Placement("gloo", "cuda")
    assert key_of({"a": 1}, here) != key_of({"a": 1}, there)  # another placement, another run


KERNEL_CELL = """
import threading
import ddplab, rank_fns
from ddplab.chapters.averaging import averaging, plots
from ddplab.common.results import to_json
from ddplab.screen import widgets

def note(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")

def quick(world_size=4, batch_size=8):
    result = averaging.run(world_size=world_size, batch_size=batch_size)
    if threading.current_thread().name == "ddplab-ahead":
        note(f"quick {world_size} {batch_size}")
    return result

def slow(a=5, b=5, c=5):
    ahead = threading.current_thread().name == "ddplab-ahead"
    note(f"slow start {ahead}")
    ddplab.run(rank_fns.sleep, 2, seconds=3.0)
    note(f"slow end {ahead}")
    return averaging.run(world_size=2, seed=a + b + c)

panel = widgets.explore(quick, plots.gradients, world_size=(1, 4), batch_size=(1, 8))
other = widgets.explore(slow, plots.gradients, a=(0, 10), b=(0, 10), c=(0, 10))
print(panel.children[0].children[0].model_id)
"""


def send_move(client, comm_id: str, value) -> None:
    """Set a widget's value as the page does (a comm message, not a cell); wait until the
    kernel is idle again."""
    content = {"comm_id": comm_id, "data": {"method": "update", "state": {"value": value},
                                            "buffer_paths": []}}
    message = client.session.msg("comm_msg", content)
    client.shell_channel.send(message)
    while True:
        msg = client.get_iopub_msg(timeout=120)
        if (msg["parent_header"].get("msg_id") == message["header"]["msg_id"]
                and msg["msg_type"] == "status"
                and msg["content"]["execution_state"] == "idle"):
            return


def test_in_a_kernel_a_move_shows_what_ran_ahead_at_once_and_nothing_outlives_it(tmp_path):
    jupyter_client = pytest.importorskip("jupyter_client")
    psutil = pytest.importorskip("psutil")
    from test_kernel import HERE, execute

    log = tmp_path / "ahead.log"
    manager = jupyter_client.KernelManager(kernel_name="python3")
    path = os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])
    manager.start_kernel(cwd=HERE, env=dict(os.environ, PYTHONPATH=path))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        out, error = execute(client, f"LOG = {str(log)!r}\n" + KERNEL_CELL)
        assert error is None, out
        slider_id = out.strip().splitlines()[-1]

        def lines():
            return log.read_text().splitlines() if log.exists() else []

        # Read the log, not the kernel (a cell would pause the thread): the first panel's
        # neighbours run first, then the second's, each a call of 3 s.
        until(lambda: {"quick 3 8", "quick 4 7"} <= set(lines())
              and lines()[-1] == "slow start True", timeout=180)
        before = lines()
        send_move(client, slider_id, 3)  # world size 4 -> 3: run ahead
        assert lines() == before  # shown while the call of 3 s ran on: it did not wait
        out, error = execute(client, (
            "c = panel.computed\n"
            "print(panel.children[-2].value)\n"
            "print(all(to_json(c.kept.get(c.key(dict(world_size=w, batch_size=b))).result)\n"
            "          == to_json(averaging.run(world_size=w, batch_size=b))\n"
            "          for w, b in [(3, 8), (4, 7), (4, 8)]))"))
        assert error is None and "run ahead while you read" in out, out
        assert out.split()[-1] == "True", out  # kept results equal fresh runs
        assert "Figure" not in out  # no figure of the thread's in a cell
        assert lines()[-1] == "slow end True"  # the cell waited for the call under way
        kernel = psutil.Process(manager.provisioner.process.pid)
        family = [kernel, *kernel.children(recursive=True)]
        assert len(family) > 2  # the forkserver and the ranks
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)
    gone, alive = psutil.wait_procs(family, timeout=30)
    assert not alive, alive  # no rank, forkserver or kernel left


def test_the_panel_used_last_runs_ahead_first_the_moved_direction_first(owner):
    log = []

    def panel_run(name):
        def run(x=5):
            if threading.current_thread().name == "ddplab-ahead":
                log.append((name, x))
            return averaging.run(world_size=2, seed=x)
        return run

    first = widgets.explore(panel_run("first"), plots.gradients, x=(0, 10))
    second = widgets.explore(panel_run("second"), plots.gradients, x=(0, 10))
    settle(owner)
    assert log == [("first", 6), ("first", 4), ("second", 6), ("second", 4)]  # top down
    second.children[0].children[0].value = 3  # run by the reader: down
    settle(owner)
    assert log[4:] == [("second", 2)]  # 4 was kept; down first, then nothing left
    first.children[0].children[0].value = 6  # kept: shown, and first is the panel used now
    settle(owner)
    assert log[5:] == [("first", 7)]


def test_a_run_kept_on_one_placement_is_not_shown_on_another(owner):
    panel = widgets.explore(averaging.run, plots.gradients, world_size=(1, 4))
    settle(owner)
    computed, status = panel.computed, panel.children[-2]
    assert computed.key({"world_size": 3}) in computed.kept
    owner.cell_starts()  # as the cell that places the process elsewhere pauses the thread
    try:
        with ddplab.placed(backend="gloo", device="cuda"):
            assert computed.key({"world_size": 3}) not in computed.kept
            panel.children[0].children[0].value = 3
            assert not status.value.startswith("shown in")  # run there, not gloo on cpu's
    finally:
        owner.cell_ends()


def test_a_capped_slider_s_neighbours_stay_within_what_the_placement_serves(owner,
                                                                             monkeypatch):
    """A panel made where NCCL serves 2 ranks (2 GPUs, read by the panel as given here; its
    runs still go to this process's placement): no value above 2 ranks is run ahead, from a
    world-size slider or from two controls whose product is the world size."""
    monkeypatch.setattr(widgets, "placement", lambda: Placement("nccl", "cuda"))
    monkeypatch.setattr(widgets, "gpu_count", lambda: 2)
    ran = []

    def grid(rows=1, cols=2):
        if threading.current_thread().name == "ddplab-ahead":
            ran.append(rows * cols)
        return averaging.run(world_size=rows * cols)

    grid.world_size_of = lambda rows=1, cols=2, **_: rows * cols
    capped = widgets.explore(averaging.run, plots.gradients, world_size=(1, 4))
    both = widgets.explore(grid, plots.gradients, rows=(1, 3), cols=(1, 3))
    assert capped.children[0].children[0].max == 2
    settle(owner)
    assert [v["world_size"] for v in capped.computed.neighbours()] == [2]  # 1, up to the cap
    assert both.computed.neighbours() == [{"rows": 1, "cols": 1}]  # not 1 x 3, nor 2 x 2
    assert ran == [1]
