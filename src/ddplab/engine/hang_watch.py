"""Running a pitfall that may hang: the ranks' own report of how far they got, a collective
that names the missing ranks, and the caller's timeout that ends the hang.

Inside a rank (``work_groups``, ``note``, ``check_in``):

- The pitfall's DDP runs on a group of its own, formed with torch's default timeout
  (``torch.distributed.constants.default_pg_timeout``, 30 minutes for gloo), as the reader's
  would be. The pool keeps its main group across calls, with the timeout of whichever call
  formed it, so a collective on that group could give up before the caller does; on a group of
  its own only the caller's timeout ends the hang.
- ``note`` writes one line to the rank's log (ranks never write into cells). A hung rank returns
  nothing, so the caller reads how far every rank got from these lines. ``watch_ddp`` and
  ``finish`` also note, before each call that waits for the other ranks, which call it is
  (``waiting=...``), so that a panel can say where each rank waits while the run hangs
  (``ddplab.screen.while_running``).
- ``check_in`` is ``dist.monitored_barrier`` on a second group (the pitfall's group may be stuck
  in a collective that a barrier on it would be confused with): rank 0 raises naming every rank
  that did not arrive within its timeout (``wait_all_ranks=True``); the other ranks raise naming
  rank 0 when rank 0 never answers. The message is noted, not raised.

In the caller, ``run_watched`` calls ``ddplab.run`` with the timeout, turns a ``TimeoutError``
into the outcome ``"hung"`` and the seconds it took, and reads the notes of this call from the
ranks' logs. The pool ends every rank process after a timeout and starts fresh ones on the next
call (ARCHITECTURE.md, Failures).

Under torchrun there is no pool to end a hang: a hung command waits for the group's own timeout,
as the reader's job would. The hang commands are meant for the local pool.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import textwrap
import threading
import time
import uuid

import torch
import torch.distributed as dist
from torch.distributed.constants import default_pg_timeout

from ddplab.common.checks import positive_number
from ddplab.engine import notes
from ddplab.engine import placement as placements  # (``placement`` is a field name here)
from ddplab.engine.cluster import logs, run
from ddplab.engine.errors import RankError

# ---------------------------------------------------------------- on every rank


def work_groups(check_in_seconds: float):
    """(the pitfall's group, with torch's default timeout; the group ``check_in`` uses).
    Every rank must call this, in the same order, and ``close_groups`` before returning."""
    work = dist.new_group(backend="gloo" if dist.get_backend() == "gloo" else None,
                          timeout=default_pg_timeout)
    watch = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=check_in_seconds))
    return work, watch


def close_groups(*groups) -> None:
    """Subgroups left alive would keep their sockets in the pool's warm ranks."""
    for group in groups:
        dist.destroy_process_group(group)


note = notes.note  # one line in this rank's log that the caller reads back (engine.notes)


def watch_ddp(call_id: str, rank: int, ddp) -> None:
    """Note, for every forward of ``ddp``, the calls in which it waits for the other ranks:
    DDP's forward (it broadcasts buffers from rank 0 when the model has some, and inside
    ``Join`` all-reduces a flag: ``DistributedDataParallel._pre_forward``, torch 2.13
    ``nn/parallel/distributed.py``:1762 and :1781) and, in training,
    the backward that follows (the gradient all-reduce, launched from autograd hooks). Hooks,
    so that the loops a page shows stay plain."""
    forwards = [0]

    def before(module, args):
        what = "evaluation" if not torch.is_grad_enabled() else f"step {forwards[0]}"
        note(call_id, rank, waiting=f"DDP's forward of {what} (its buffer broadcast, or "
                                    "Join's all-reduce)")

    def after(module, args, output):
        # A deep copy of the model (a reference step without DDP) carries this hook along.
        if module is ddp.module and torch.is_grad_enabled():
            note(call_id, rank, waiting=f"the backward of step {forwards[0]}: DDP's gradient "
                                        "all-reduce")
            forwards[0] += 1

    ddp.register_forward_pre_hook(before)
    ddp.module.register_forward_hook(after)


def check_in(watch, seconds: float) -> str | None:
    """``monitored_barrier`` on ``watch``: None when every rank arrived, else its message."""
    try:
        dist.monitored_barrier(group=watch, timeout=datetime.timedelta(seconds=seconds),
                               wait_all_ranks=True)
    except RuntimeError as exc:
        return str(exc).splitlines()[0]
    return None


def finish(call_id: str, rank: int, work, watch, seconds: float) -> str | None:
    """Check in on ``watch``, note the outcome, and close both groups when every rank
    arrived. Else another rank is stuck in a collective of ``work``: destroying it would end
    that wait with "Connection closed", so the caller's timeout ends the run instead."""
    note(call_id, rank, waiting=f"the check-in (monitored_barrier, up to {seconds:g} s)")
    message = check_in(watch, seconds)
    note(call_id, rank, check_in=message)
    if message is None:
        close_groups(work, watch)
    return message


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class Watched:
    """How a call that may hang ended."""

    outcome: str  # "finished", "hung", or "died" (with catch_rank_errors)
    seconds: float  # from the call to its result, or to the TimeoutError
    results: list | None  # every rank's result when it finished
    notes: list[list[dict]]  # per rank, the lines it noted during this call
    error: str | None  # the TimeoutError's (or RankError's) message
    during: object = None  # what ``run_watched``'s ``during`` returned
    placement: object = None  # where the ranks ran (engine.placement.Placement), hung or not

    @property
    def steps_completed_per_rank(self) -> list[int]:
        """Per rank, the steps it noted (``note(..., step=k)``)."""
        return [sum("step" in n for n in noted) for noted in self.notes]

    @property
    def check_in_messages(self) -> list[str | None]:
        """Per rank, the message of its check-in (:func:`finish`); None when it passed or
        never got there."""
        return [next((n["check_in"] for n in noted if "check_in" in n), None)
                for noted in self.notes]


def run_watched(fn, world_size: int, timeout: float, catch_rank_errors: bool = False,
                during=None, **params) -> Watched:
    """``ddplab.run(fn, world_size, ...)``; a hang is the outcome "hung", not an exception
    (and with ``catch_rank_errors`` a rank that raised or died is the outcome "died").
    ``during(call_id)``, if given, runs in a thread beside the call (it may read the ranks'
    notes while they hang); what it returns is ``Watched.during``."""
    positive_number("timeout", timeout)
    call_id = uuid.uuid4().hex
    beside = None if during is None else DuringCall(during, call_id)
    placement = placements.serving(world_size)  # known even if it hangs
    start = time.perf_counter()
    try:
        results = run(fn, world_size, timeout=timeout, call_id=call_id, **params)
        outcome, error = "finished", None
    except TimeoutError as exc:
        results, outcome, error = None, "hung", str(exc)
    except RankError as exc:
        if not catch_rank_errors:
            raise
        results, outcome, error = None, "died", str(exc)
    seconds = time.perf_counter() - start
    return Watched(outcome=outcome, seconds=seconds, results=results,
                   notes=read_notes(call_id, world_size), error=error,
                   during=None if beside is None else beside.result(), placement=placement)


class DuringCall(threading.Thread):
    """``fn(call_id)`` in a thread; ``result()`` waits for it and returns (or raises) its
    outcome."""

    def __init__(self, fn, call_id: str):
        super().__init__(daemon=True)
        self.fn, self.call_id, self.value, self.error = fn, call_id, None, None
        self.start()

    def run(self) -> None:
        try:
            self.value = self.fn(self.call_id)
        except BaseException as exc:  # raised in the caller by result()
            self.error = exc

    def result(self):
        self.join()
        if self.error is not None:
            raise self.error
        return self.value


def read_notes(call_id: str, world_size: int) -> list[list[dict]]:
    """Per rank, the notes of call ``call_id`` from the ranks' logs (also while they run:
    ``run_watched``'s ``during``)."""
    return notes.of_call(logs(), call_id, world_size)


def named_ranks(message: str | None) -> list[int]:
    """The ranks a ``monitored_barrier`` message names as missing.

    Rank 0's message (ProcessGroupGloo::monitoredBarrier, torch 2.13): "Ranks 1, 3 failed to
    pass monitoredBarrier in 2000 ms"; another rank's, when rank 0 never answered: "Rank 1
    successfully reached monitoredBarrier, but received errors while waiting for send/recv
    from rank 0. Please check rank 0 logs for faulty rank."
    """
    if not message:
        return []
    found = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", message)
    if found:
        return sorted(int(r) for r in found.group(1).split(",") if r.strip())
    found = re.search(r"check rank (\d+) logs for faulty rank", message)
    return [int(found.group(1))] if found else []


def missing_ranks(messages: list[str | None]) -> list[int]:
    """The ranks missing from a ``check_in``, from every rank's message (None: it passed).
    Rank 0's message, when it has one, is the list (rank 0 waits for all, then gives up, after
    which the other ranks name rank 0); without it, the rank the others name."""
    if messages and named_ranks(messages[0]):
        return named_ranks(messages[0])
    return sorted({r for m in messages[1:] for r in named_ranks(m)})


def message_lines(messages: list[str | None], missing: list[int],
                  template: str = "rank {rank}'s monitored_barrier: {message}") -> list[str]:
    """For a result's ``describe()``: each rank's message in ``template`` (``{message:.220}``
    cuts it), wrapped to the page's column, then the missing ranks the messages name."""
    lines = [textwrap.fill(template.format(rank=rank, message=message), 78,
                           subsequent_indent="  ")
             for rank, message in enumerate(messages) if message]
    return lines + ([f"missing ranks named: {missing}"] if missing else [])
