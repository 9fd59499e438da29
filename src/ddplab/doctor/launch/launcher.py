"""The doctor's side of a local run: start the ranks, watch them, name a hang, clean up.

Each rank is forked from the doctor's zygote (``processes``, ``zygote``: torch imported
once) into a session of its own (so that a kill reaches the processes it starts: spawned
ranks, DataLoader workers), with torchrun's environment, its output in a log file. The
doctor watches its store: every rank done (then ``release``), a crash (a short grace for the
others' reports, then a roll call), or an alarm from a rank's
watchdog (a collective, a backward or DDP's construction that has not returned within the
timeout: a roll call names where every rank is). Whatever happens, every process is gone when
``run`` returns.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time

import ddplab.doctor.records as records
from ddplab.doctor.launch.processes import Zygote
from ddplab.doctor.messages import (
    Alarm,
    Done,
    Hang,
    Hello,
    LauncherDone,
    RankEvidence,
    Run,
    Signal,
    Where,
)
from ddplab.doctor.ranks.children import SITE
from ddplab.doctor.ranks.rank import ARGS, SCRIPT
from ddplab.doctor.ranks.scratch import VARIABLE as SCRATCH
from ddplab.doctor.ranks.watch.group import LOCAL
from ddplab.doctor.settings import Settings
from ddplab.doctor.store import ADDRESS, Store

POLL = 0.05  # seconds between looks at the store
GRACE = 1.0  # after a crash, how long the other ranks may take to report theirs
ROLL_CALL = 2.0  # how long ranks may take to answer a roll call
LOG_TAIL = 4000  # characters of each process's output kept


def base_environment() -> dict:
    """What every process of a run shares, set before torch is imported (the zygote's)."""
    import ddplab

    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),  # torchrun's default
                "PYTHONUNBUFFERED": "1", LOCAL: "1"})
    if sys.platform.startswith("linux"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo's sockets on loopback only
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(ddplab.__file__)))
    paths = [SITE, package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)  # SITE: the spawned ranks' sitecustomize
    return env


def environment(rank: int, script: str, args: list[str], settings: Settings,
                store: Store, scratch: str) -> dict:
    """torchrun's variables for ``rank`` (one node), and the doctor's (``scratch``: the
    folder the script's writes land in)."""
    size = 1 if settings.one_process else settings.world_size
    env = base_environment()
    env.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(size),
                "LOCAL_WORLD_SIZE": str(size), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
                "ROLE_WORLD_SIZE": str(size), "GROUP_WORLD_SIZE": "1", "ROLE_NAME": "default",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": store.address.rsplit(":", 1)[1],
                "TORCHELASTIC_RUN_ID": "ddplab-doctor", "TORCHELASTIC_RESTART_COUNT": "0",
                "TORCHELASTIC_MAX_RESTARTS": "0", ADDRESS: store.address,
                SCRIPT: os.path.abspath(script), ARGS: json.dumps(args), SCRATCH: scratch,
                **settings.environment()})
    return env


def run(script: str, args: list[str], settings: Settings, zygote: Zygote,
        cwd: str | None = None) -> Run:
    """Run ``script`` on ``settings.world_size`` ranks forked from ``zygote``, in ``cwd``
    (the current folder by default), and collect what they saw."""
    started = time.perf_counter()
    store = Store.host()
    count = 1 if settings.one_process else settings.world_size
    with tempfile.TemporaryDirectory(prefix="ddplab-doctor-") as logs:
        result, pids = Run(), {}
        scratch = os.path.join(logs, "scratch")  # the script's writes: gone with the run
        os.mkdir(scratch)
        try:
            for rank in range(count):
                pids[rank] = zygote.start(environment(rank, script, args, settings, store,
                                                      scratch),
                                          os.path.join(logs, f"rank{rank}.log"),
                                          cwd or os.getcwd())
            result = watch(store, settings, lambda: zygote.status(pids[0]) is not None)
            store.signal(Signal.RELEASE)  # a hung or failed run ends at once: its ranks are stuck
            deadline = time.monotonic() + (0.0 if result.hang else 3.0)
            while (any(zygote.status(p) is None for p in pids.values())
                   and time.monotonic() < deadline):
                time.sleep(POLL)
        finally:
            zygote.kill(pids.values())
            for rank in range(count):
                path = os.path.join(logs, f"rank{rank}.log")
                if os.path.exists(path):
                    with open(path, "rb") as f:
                        result.output[f"rank{rank}"] = f.read().decode(errors="replace")[
                            -LOG_TAIL:]
    result.seconds = time.perf_counter() - started
    return result


def watch(store: Store, settings: Settings, first_gone=lambda: False) -> Run:
    """Until every rank is done, one crashed, one hangs, or rank 0's process is gone
    (``first_gone()``)."""
    result = Run()
    crash_seen = None
    while True:
        time.sleep(POLL)
        result.mode = store.mode()
        result.launcher = store.read(LauncherDone)
        hello = store.read(Hello, 0)
        if result.mode == records.Mode.RANKS or settings.one_process:
            result.world_size = 1 if settings.one_process else settings.world_size
        elif hello is not None:
            result.world_size = hello.world_size
        expected = range(result.world_size or 0)
        read_outcomes(store, result, expected)
        alarm = store.read(Alarm)
        if alarm is not None:
            result.hang = Hang(alarm, roll_call(store, result, expected))
            break
        if any(o.outcome == records.Outcome.CRASHED for o in result.outcomes.values()):
            crash_seen = crash_seen or time.monotonic()
            if time.monotonic() - crash_seen > GRACE or len(result.outcomes) == len(expected):
                result.hang = Hang(None, roll_call(store, result, expected))
                break
        if expected and len(result.outcomes) == len(expected):
            break
        if result.launcher is not None and (
                result.mode != records.Mode.SPAWN or not expected
                or result.launcher.outcome == records.Outcome.CRASHED):
            break  # no ranks at all, or a launcher whose ranks failed before reporting
        if result.launcher is None and 0 not in result.outcomes and first_gone():
            # rank 0's process died without a word (its output says why; gloo can end a
            # process from its own thread): the other ranks get the grace a crash gives them
            # to report what they saw before the run is collected
            crash_seen = crash_seen or time.monotonic()
            if time.monotonic() - crash_seen > GRACE:
                break
    collect(store, result, expected)
    return result


def read_outcomes(store: Store, result: Run, expected) -> None:
    """The ``Done`` of every rank that has said it since the last look."""
    for rank in expected:
        if rank not in result.outcomes:
            done = store.read(Done, rank)
            if done is not None:
                result.outcomes[rank] = done


def roll_call(store: Store, result: Run, expected) -> dict[int, Where]:
    """Ask every rank not yet done where it is; their watchdog threads answer."""
    store.signal(Signal.ROLLCALL)
    missing = [r for r in expected if r not in result.outcomes]
    deadline = time.monotonic() + ROLL_CALL
    positions = {}
    while missing and time.monotonic() < deadline:
        for rank in list(missing):
            answer = store.read(Where, rank)
            if answer is not None:
                positions[rank] = answer
                missing.remove(rank)
        time.sleep(POLL)
    for rank in missing:
        positions[rank] = Where(rank, silent=True)
    return positions


def ledger(store: Store, rank: int, result: Run) -> RankEvidence | None:
    """The evidence of a rank that published none (gloo aborted it): the collectives it
    wrote to its ledger in the store before each one ran."""
    entries = store.ledger(rank)
    if not entries:
        return None
    group = next((e.records.get(records.GroupInit.KIND) for e in result.evidence.values()
                  if e.records.get(records.GroupInit.KIND)), [])  # the group's, not the rank's
    return RankEvidence(rank, result.world_size, max((e.step for e in entries), default=0),
                        None, {records.Collective.KIND: entries, records.GroupInit.KIND: group})


def collect(store: Store, result: Run, expected) -> None:
    """Every rank's evidence: published, else carried by its answer to the roll call (moved
    out of it), else its ledger."""
    positions = result.hang.positions if result.hang else {}
    for rank in sorted(expected, key=lambda r: not store.has(RankEvidence.key(r))):
        found = store.read(RankEvidence, rank)
        if rank in positions and positions[rank].evidence is not None:
            found = found or positions[rank].evidence
            positions[rank] = dataclasses.replace(positions[rank], evidence=None)
        if found is None:
            found = ledger(store, rank, result)
        if found is not None:
            result.evidence[rank] = found
