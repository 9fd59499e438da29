"""Collective checks: ``collective-on-some-ranks`` (the ranks' sequences of collectives
compared), ``gradients-reduced-twice`` and ``barrier-every-step`` (collectives the script adds
to what DDP already does)."""

from __future__ import annotations

import ddplab.doctor.records as records
from ddplab.doctor.judging.check import ANY_CRASH, Check
from ddplab.doctor.judging.findings import place
from ddplab.doctor.judging.judgement import (
    Problem,
    file_line,
    found,
    not_applicable,
    passed,
    ranks_text,
)


def _sequences(evidence) -> dict:
    """group -> rank -> [collective, ...] in order (point-to-point left out: one-sided)."""
    groups = {}
    for rank in evidence.ranks:
        for c in evidence.records(records.Collective, rank):
            if not c.p2p:
                groups.setdefault(c.group, {}).setdefault(rank, []).append(c)
    return groups


def _members(evidence, group: str) -> list:
    return evidence.ranks if group == "world" else [
        r for r in map(int, group.split(",")) if r in evidence.ranks]


FIX_DDP_FORWARD = """\
model.eval()
with torch.no_grad():  # on every rank, each on its shard (then reduce sums and counts)
    outputs = model(inputs)
# or on rank 0 alone, through the module DDP wraps: no collective inside
if dist.get_rank() == 0:
    outputs = model.module(inputs)"""


FIX_MODULE_COLLECTIVE = """\
model.eval()  # SyncBatchNorm in eval(): its running statistics, no collective
with torch.no_grad():
    if dist.get_rank() == 0:
        outputs = model.module(inputs)
model.train()
# or run the check on every rank, each on its own inputs"""


SIZED = ("all_reduce", "reduce", "broadcast")  # the same size and dtype on every rank


def _signature(c) -> tuple | None:
    """What must agree across ranks at the same point of a group's sequence: the op, whose it
    is (the script's or DDP's), and for a reduction or broadcast the tensor's dtype and size."""
    if c is None:
        return None
    if c.op in SIZED:
        return c.op, c.by, c.dtype, c.numel
    return c.op, c.by


def _crashed(evidence, rank: int) -> bool:
    return evidence.outcome(rank) == records.Outcome.CRASHED


def _named(c) -> str:
    """A collective as the report names it: the script's op, or DDP's own."""
    return f"{c.by} ({c.op})" if c.by else c.op


def _module_alone(evidence, at: dict, calls: dict):
    """(rank, its Root) where a rank ran the module inside a DDP without it (``model.module``)
    at the line of its call in the mismatch, at the line where the hang found it, or, a rank
    that never reached the collective, after its last one: the module's own collective
    (SyncBatchNorm's) is the one left unmatched."""
    for rank, c in at.items():
        if c is None:
            last = max((x.t for x in calls.get(rank, [])), default=-1)
            root = next((r for r in evidence.records(records.Root, rank)
                         if r.kind == "bypass" and r.t > last), None)
            if root is not None:
                return rank, root
    spots = {(r, c.file, c.line) for r, c in at.items() if c is not None}
    hang = evidence.run.hang
    if hang is not None:
        spots |= {(r, p.file, p.line) for r, p in (hang.positions or {}).items()
                  if p.inner or p.waiting}
        if hang.alarm is not None:
            waiting = hang.alarm.waiting
            spots.add((hang.alarm.rank, waiting.file, waiting.line))
    for rank in evidence.ranks:
        for root in evidence.records(records.Root, rank):
            if root.kind == "bypass" and (rank, root.file, root.line) in spots:
                return rank, root
    return None


def collective_on_some_ranks(evidence, earlier):
    """The ranks of a group called different collectives, or different numbers of them."""
    if (evidence.world_size or 0) < 2:
        return not_applicable("one rank")
    groups = _sequences(evidence)
    if not groups:
        return not_applicable("no collective was called (the script's or DDP's)")
    problems, stopped = [], []  # stopped: where a group's sequences part for a known reason
    for group, per_rank in groups.items():
        members = _members(evidence, group)
        calls = {r: per_rank.get(r, []) for r in members}
        longest = max(len(c) for c in calls.values())
        named = "the default group" if group == "world" else "group " + group
        for i in range(longest):
            at = {r: c[i] if i < len(c) else None for r, c in calls.items()}
            ops = {r: _signature(c) for r, c in at.items()}
            if len(set(ops.values())) == 1:
                continue
            issued = {r for r, c in at.items() if c is not None}
            first = at[min(issued)]
            counts = ", ".join(f"rank {r}: {len(c)}" for r, c in sorted(calls.items()))
            alike = f"the first {i} collective{'s' * (i > 1)} alike, then " if i else ""
            if all(_crashed(evidence, r) for r, c in at.items() if c is None) \
                    and len(issued) < len(at):
                # a rank that failed calls nothing more: its failure is the finding
                stopped.append(f"{named}: {alike}{ranks_text(set(at) - issued)} crashed and "
                               f"called no more (collectives called: {counts})")
                break
            if any(c is not None and c.by == records.DdpCall.GRADIENTS for c in at.values()) \
                    and earlier.found("uneven-inputs"):
                stopped.append(f"{named}: {alike}the gradient all-reduce of a backward some "
                               f"ranks did not run, which uneven-inputs names (collectives "
                               f"called: {counts})")
                break
            if None in ops.values():
                text = (f"{_named(first)} at {place(*file_line(first))} runs on "
                        f"{ranks_text(issued)} only (collective #{i + 1} of {named}; "
                        f"collectives called: {counts}): the other ranks never join it, so "
                        f"{ranks_text(issued)} either wait{'s' * (len(issued) == 1)} forever "
                        f"or pair{'s' * (len(issued) == 1)} it with a different collective")
            else:
                text = (f"collective #{i + 1} of the group is "
                        + "; ".join(f"{_named(c)} at {place(*file_line(c))} on rank {r}"
                                    for r, c in sorted(at.items()))
                        + ": the ranks call different collectives at the same point"
                        + ("" if len({c.op for c in at.values()}) > 1 else
                           " (" + "; ".join(f"{c.dtype} x {c.numel} on rank {r}"
                                            for r, c in sorted(at.items())) + ")"))
            ddp_forward = first.by == records.DdpCall.BUFFERS
            alone = _module_alone(evidence, at, calls)
            fix = FIX_DDP_FORWARD if ddp_forward else None
            if alone is not None:
                rank, root = alone
                text += (f": rank {rank} runs the {root.module} that DDP wraps on its own at "
                         f"{place(*file_line(root))} (model.module), and the module issues a "
                         "collective itself there (as a SyncBatchNorm in training mode does, "
                         "for its batch statistics), which the other ranks never join")
                fix = FIX_MODULE_COLLECTIVE
            elif any(c is not None and c.by == records.DdpCall.SYNC_BATCHNORM
                     for c in at.values()):
                rank, c = next((r, c) for r, c in sorted(at.items()) if c is not None
                               and c.by == records.DdpCall.SYNC_BATCHNORM)
                text += (f": rank {rank}'s forward at {place(*file_line(c))} runs a "
                         "SyncBatchNorm in training mode, which all-reduces its batch "
                         "statistics, a collective the other ranks never join")
                fix = FIX_MODULE_COLLECTIVE
            elif ddp_forward:
                text += (": the DDP's forward broadcasts rank 0's buffers first, a collective "
                         "the other ranks only join in their own forward")
            problems.append(Problem(text, {"group": group, "index": i + 1, "calls": {
                r: (c and {"op": c.op, "by": c.by, "line": c.line}) for r, c in at.items()},
                "counts": {r: len(c) for r, c in calls.items()},
                **({"module_alone": {"rank": alone[0], "line": alone[1].line}} if alone else {})},
                *file_line(first), fix=fix))
            break
    if problems:
        return found(*problems)
    if stopped:
        return passed("the ranks called the same collectives (DDP's own included) in the same "
                      "order as far as each went: " + "; ".join(stopped))
    called = {r: sum(len(per_rank.get(r, [])) for per_rank in groups.values())
              for r in evidence.ranks}
    if len(set(called.values())) == 1:
        return passed(f"every rank called the same {called[evidence.ranks[0]]} collectives "
                      "(DDP's own included) in the same order")
    return passed("each group's ranks called the same collectives in the same order (DDP's own "
                  "included; collectives called: "
                  + ", ".join(f"rank {r}: {n}" for r, n in sorted(called.items())) + ")")


def gradients_reduced_twice(evidence, earlier):
    """The script all-reduces gradients of DDP's parameters after a backward in which DDP
    already all-reduced them (a hand-written average left in after the move to DDP)."""
    ddps = evidence.records(records.Ddp)
    if not ddps:
        return not_applicable("no DistributedDataParallel model")
    own = [c for c in evidence.records(records.Collective) if c.grad_of and not c.by]
    for step in evidence.records(records.Step):
        if not any(m.sync for m in step.micro):
            continue
        calls = [c for c in own if c.step == step.number - 1 and c.t < step.t]
        if not calls:
            continue
        names = sorted({c.grad_of for c in calls})
        params = sum(d.params for d in ddps)
        first = calls[0]
        size = sum(c.numel or 0 for c in calls)
        return found(Problem(
            f"before optimizer step {step.number}, DDP all-reduced the gradients in the "
            f"backward, and the script all-reduces {len(names)} of the {params} gradients "
            f"again ({len(calls)} {first.op}({first.reduce}) calls from "
            f"{place(*file_line(first))}, {size} numbers): they were already averaged, so "
            "this only moves them a second time"
            + (" (and a SUM there makes them world_size times the mean unless the script "
               "divides)" if first.reduce == "SUM" else ""),
            {"step": step.number, "calls": len(calls), "gradients": len(names),
             "parameters": params, "numbers": size, "reduce": first.reduce},
            *file_line(first)))
    if not own:
        return passed("the script never all-reduces a gradient DDP has reduced")
    return passed("the script all-reduces gradients only where DDP did not (under no_sync)")


BARRIERS = ("barrier", "monitored_barrier")


def barrier_every_step(evidence, earlier):
    """A barrier in the training loop, before every optimizer step: DDP's backward already
    keeps the ranks in step, so each one adds a collective per step and, on NCCL, the host
    waits there for the GPU (ProcessGroupNCCL's barrier blocks the CPU thread)."""
    steps = evidence.records(records.Step)
    if len(steps) < 2:
        return not_applicable("fewer than two optimizer steps")
    own = [c for c in evidence.records(records.Collective) if not c.by and not c.p2p]
    barriers = {}
    small = {}
    for step in steps:
        calls = [c for c in own if c.step == step.number - 1 and c.t < step.t]
        barriers[step.number] = [c for c in calls if c.op in BARRIERS]
        small[step.number] = [c for c in calls if c.op not in BARRIERS and not c.grad_of
                              and (c.numel or 0) <= 8]
    if not all(barriers.values()):
        return passed(f"no barrier before every one of the {len(steps)} optimizer steps")
    first = barriers[steps[0].number][0]
    per_step = min(len(v) for v in small.values())
    return found(Problem(
        f"{first.op} at {place(*file_line(first))} runs before each of the {len(steps)} "
        "optimizer steps"
        + (f", beside {per_step} all-reduces of a few numbers each step (logging)"
           if per_step else "")
        + ": each adds a collective per step, and on NCCL the host waits for the GPU there "
          "(ProcessGroupNCCL's barrier blocks the CPU thread); DDP's backward already keeps "
          "the ranks in step",
        {"steps": len(steps), "barriers_per_step": min(len(v) for v in barriers.values()),
         "small_collectives_per_step": per_step}, *file_line(first)))


FIX_EVERY_RANK = """\
dist.all_reduce(loss_sum)  # every rank calls the collective
if dist.get_rank() == 0:  # only the printing is rank 0's
    print(loss_sum.item() / dist.get_world_size())"""


FIX_REDUCED_ONCE = """\
loss.backward()  # DDP all-reduces and averages the gradients here
# no loop of dist.all_reduce(p.grad) after it: that is DDP's job, done once
optimizer.step()"""


FIX_NO_BARRIER = """\
for step, (x, y) in enumerate(loader):
    ...  # no dist.barrier() here: DDP's backward already synchronises the ranks
    if step % log_every == 0:  # reduce the numbers to log now and then, not every step
        dist.all_reduce(loss_sum)"""


COLLECTIVE_ON_SOME_RANKS = Check(
    "collective-on-some-ranks", "error",
    "every rank calls the same collectives, in the same order",
    "hangs-rank0-collective",
    FIX_EVERY_RANK, collective_on_some_ranks,
    defers_to=('uneven-inputs',), explains_hang=True, explains=ANY_CRASH)


GRADIENTS_REDUCED_TWICE = Check(
    "gradients-reduced-twice", "waste",
    "the script does not all-reduce gradients DDP has already all-reduced",
    "averaging-naive",
    FIX_REDUCED_ONCE, gradients_reduced_twice)


BARRIER_EVERY_STEP = Check(
    "barrier-every-step", "waste",
    "the training loop does not wait in a barrier before every optimizer step",
    "time-cost-slower",
    FIX_NO_BARRIER, barrier_every_step)
