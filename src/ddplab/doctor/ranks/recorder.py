"""What one process saw: the evidence list, the state of its wait, its watchdog thread.

Every hook of the doctor writes a typed record here (``RECORDER.add(records.Pass(...))``);
nothing leaves the
process until the script ends, stops or crashes (``publish``), or until the coordinator asks
every rank where it is (a roll call, answered by the watchdog thread while the main thread is
stuck in a collective). Hooks cost a dict append and a frame walk, no store traffic.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
import threading
import time

import ddplab.doctor.records as records
from ddplab.doctor.messages import Alarm, Done, Hello, RankEvidence, Signal, Waiting, Where
from ddplab.doctor.ranks import where
from ddplab.doctor.settings import Settings


class DoctorStop(BaseException):
    """Raised on every rank at the same point to end a script that goes on training once its
    loaders are ended (an optimizer step after the K-th that no loader of ours fed), or that
    runs many epochs of one batch; a BaseException, so that ``except Exception`` in
    the script lets it through."""


class Recorder:
    def __init__(self):
        self.records: dict[str, list[records.Record]] = {}  # kind -> records, in order
        self.rank: int | None = None
        self.world_size: int | None = None
        self.steps = 0  # optimizer steps taken
        self.backwards = 0  # backward calls so far
        self.waiting: Waiting | None = None  # the blocking call the main thread is in
        self.store = None
        self.main_ident = threading.main_thread().ident
        self.published = False
        self.draining: str | None = None  # why training has ended (one batch an epoch from now)
        self._watchdog = None
        self.counters: dict[str, int] = {}
        self.on_alarm = None  # rank 0 under torchrun: who judges a hang
        self.abort_on_signal = False  # under torchrun: end when rank 0 says so

    @property
    def timeout(self) -> float:
        """Seconds a call may wait before it is a hang: the run's settings, read when asked
        (under torchrun the doctor sets them after this recorder exists)."""
        return Settings.current().timeout

    # -- recording

    def add(self, record: records.Record) -> records.Record:
        """Keep ``record``, stamped with the steps taken so far and its place in the order of
        everything this process saw; the stamped record is returned."""
        record = dataclasses.replace(record, step=self.steps, t=self.count("t"))
        self.records.setdefault(record.KIND, []).append(record)
        return record

    def update(self, record: records.Record, **changes) -> records.Record:
        """Replace a kept record with a copy that has ``changes`` (a pass that drew one more
        batch, a collective whose result came back): records are frozen, so that what a
        judge reads is what was recorded."""
        kept = self.records[record.KIND]
        for i in range(len(kept) - 1, -1, -1):  # the record changed is nearly always the last
            if kept[i] is record:
                kept[i] = dataclasses.replace(record, **changes)
                return kept[i]
        raise ValueError(f"{record!r} is not a record this process kept")

    def drain(self, why: str) -> None:
        """From now on each pass of a loader gives one batch (``K`` steps taken, or the epochs
        they need run): the script's remaining epochs, its evaluation and its end run on."""
        if self.draining is None:
            self.draining = why

    def count(self, name: str) -> int:
        """0, 1, 2, ... for successive calls with the same name (per process)."""
        value = self.counters.get(name, 0)
        self.counters[name] = value + 1
        return value

    @contextlib.contextmanager
    def blocking(self, what: str, spot: tuple | None = None, seq: int | None = None):
        """Mark the main thread as waiting in ``what`` (a collective, a backward) at the
        reader's ``spot`` (file, line) while inside: the watchdog raises the alarm when it lasts
        longer than the timeout."""
        outer = self.waiting
        if outer is None and threading.get_ident() == self.main_ident:
            file, line = spot or (None, None)
            self.waiting = Waiting(what, time.time(), file=file, line=line, seq=seq)
        try:
            yield
        finally:
            if outer is None and threading.get_ident() == self.main_ident:
                self.waiting = None

    # -- leaving the process

    def attach(self, store, rank: int, world_size: int) -> None:
        """Known at last: this process is ``rank``; start the watchdog."""
        self.store, self.rank, self.world_size = store, rank, world_size
        store.send(Hello(os.getpid(), world_size, socket.gethostname()), rank)
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch, name="ddplab-doctor-watchdog",
                                              daemon=True)
            self._watchdog.start()

    def evidence(self) -> RankEvidence:
        return RankEvidence(self.rank, self.world_size, self.steps, socket.gethostname(),
                            {kind: list(kept) for kind, kept in self.records.items()})

    def to_ledger(self, collective: records.Collective) -> None:
        """A collective into this rank's ledger in the doctor's store, before it runs: a rank
        that gloo aborts (a collective met by a different one on another rank) publishes no
        evidence, and its ledger is what the doctor compares with the other ranks'."""
        if self.store is not None:
            self.store.add_to_ledger(self.rank, collective)

    def publish(self, done: Done) -> None:
        """Evidence and how the script ended to the store, once."""
        if self.store is None or self.published:
            return
        self.published = True
        self.store.send(self.evidence(), self.rank)
        self.store.send(dataclasses.replace(done, steps=self.steps, pid=os.getpid()),
                        self.rank)

    def wait_for_release(self) -> None:
        """Stay alive until every rank is done: a rank that exits closes its connections, and
        a rank still waiting for it would fail with "Connection closed by peer" instead of
        showing the hang."""
        if self.store is not None:
            while not self.store.wait(Signal.RELEASE, 5.0):
                pass

    # -- the watchdog thread

    def _watch(self) -> None:
        from ddplab.doctor.store import Store

        store = Store.connect(self.store.address)  # the thread's own connection
        alarmed = answered = False
        while True:
            time.sleep(0.2)
            try:
                waiting = self.waiting
                if (not alarmed and waiting is not None
                        and time.time() - waiting.since > self.timeout):
                    alarmed = True
                    store.send(Alarm(self.rank, waiting, round(time.time() - waiting.since, 1)))
                if not answered and store.signalled(Signal.ROLLCALL):
                    answered = True
                    store.send(self.position(), self.rank)
                if self.on_alarm is not None and store.has(Alarm.key()):
                    self.on_alarm(store)  # under torchrun, rank 0 judges the hang itself
                    return
                if (self.on_alarm is None and self.abort_on_signal
                        and store.signalled(Signal.ABORT)):
                    _flush_and_exit(1)
            except Exception:  # the store is gone: the coordinator has ended the run
                return

    def position(self) -> Where:
        """Where the main thread is now, and everything seen so far (for a roll call)."""
        frame = sys._current_frames().get(self.main_ident)
        file, line = (where.frame_line(frame) if frame is not None else None) or (None, None)
        return Where(self.rank, file, line,
                     inner=where.inner_call(frame) if frame is not None else "",
                     waiting=self.waiting, evidence=self.evidence(), now=time.time())


def _flush_and_exit(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


RECORDER = Recorder()


def reset() -> Recorder:
    """A fresh recorder (a forked child starts with its parent's)."""
    global RECORDER
    RECORDER = Recorder()
    return RECORDER
