"""The model's replicas: ``replicas-diverge`` (a parameter or buffer that differs between
ranks after a step) and ``find-unused-parameters`` (either direction)."""

from __future__ import annotations

import ddplab.doctor.records as records
from ddplab.doctor.judging.check import Check, Crashes
from ddplab.doctor.judging.findings import place
from ddplab.doctor.judging.judgement import (
    Problem,
    file_line,
    found,
    not_applicable,
    number,
    passed,
)

FIX_BUFFERS = """\
# forward_sync_buffers left True (the default; broadcast_buffers before torch 2.13,
# deprecated since): every forward starts from rank 0's buffers
model = DDP(model, device_ids=[local_rank])
# or share the statistics themselves:
model = DDP(nn.SyncBatchNorm.convert_sync_batchnorm(model), device_ids=[local_rank])"""
FIX_COPY = """\
model = DDP(model, device_ids=[local_rank])  # broadcasts rank 0's parameters
ema = copy.deepcopy(model.module)  # after the wrap: every rank copies the same weights"""
FIX_LOAD = """\
state = torch.load(path, map_location=device)  # on every rank, before the wrap
model.load_state_dict(state)
model = DDP(model, device_ids=[local_rank])"""


FIX_LR = """\
optimizer.step()
scheduler.step()  # on every rank, not under `if rank == 0`: one LR everywhere
if dist.get_rank() == 0:  # only the printing is rank 0's
    print(f"lr {scheduler.get_last_lr()[0]:.4g}")"""


FIX_DATA_PARALLEL = """\
# under torchrun, one process per GPU: DistributedDataParallel, not DataParallel
model = DDP(model.to(local_rank), device_ids=[local_rank])"""
FIX_WRAP = """\
model = DDP(model, device_ids=[local_rank])  # on every path that trains
optimizer = torch.optim.SGD(model.parameters(), lr=lr)"""
FIX_OUTSIDE = """\
model = DDP(model, device_ids=[local_rank])  # after every parameter exists
optimizer = torch.optim.SGD(model.parameters(), lr=lr)  # the parameters DDP wraps"""
FIX_FORWARD = """\
ddp_model = DDP(model, device_ids=[local_rank])
# through DDP's forward: not model(x), ddp_model.module(x) or model.forward(x)
loss = loss_fn(ddp_model(x), y)
loss.backward()  # the gradients are all-reduced here"""


def _key(replica) -> tuple:
    return ("root", replica.root) if replica.root is not None else ("optimizer",
                                                                       replica.optimizer)


def _first_difference(evidence):
    """(replica, name, per-rank summary, step it was last equal) of the first tensor that
    differs, comparing only what every rank digested after the same step; or None."""
    per_rank = {r: {} for r in evidence.ranks}
    for r in evidence.ranks:
        for replica in evidence.records(records.Replica, r):
            per_rank[r].setdefault((_key(replica), replica.step), replica)
    base = per_rank[evidence.ranks[0]]
    common = [k for k in base if all(k in v for v in per_rank.values())]
    common.sort(key=lambda k: (k[1], k[0][0] != "optimizer", base[k].t))
    equal_after = {}  # what -> the last step it was compared equal
    for k in common:
        replica = base[k]
        for name, (digest, *_rest) in replica.tensors.items():
            values = {r: v[k].tensors.get(name) for r, v in per_rank.items()}
            if any(v is None or v[0] != digest for v in values.values()):
                return replica, name, values, equal_after.get(k[0])
        equal_after[k[0]] = k[1]
    return None


def _cause(evidence, replica, what, step):
    """(cause, (file, line), fix) of a difference between the ranks' replicas."""
    roots = evidence.records(records.Root)
    root = next((r for r in roots if r.index == replica.root), None)
    ddps = evidence.records(records.Ddp)
    ddp = next((d for d in ddps if root and d.index == root.ddp), None)
    step_record = next((s for s in evidence.records(records.Step) if s.number == step), None)
    parallel = next((r for r in roots if r.kind == "data_parallel"), None)
    bypass = next((r for r in roots if r.kind == "bypass"), None)
    loads = {r: [x for x in evidence.records(records.LoadStateDict, r) if x.after_wrap]
             for r in evidence.ranks}
    if ddp and what == "buffer" and not ddp.broadcast_buffers:
        return (f"DDP at {place(*file_line(ddp))} syncs no buffers (forward_sync_buffers=False, "
                "or broadcast_buffers=False, its name before torch 2.13): each rank keeps its "
                "own running statistics", file_line(ddp), FIX_BUFFERS)
    if parallel is not None:
        return (f"the model run at {place(*file_line(parallel))} is an nn.DataParallel, which "
                "splits a batch over one process's GPUs and never talks to the other ranks: "
                "each rank trains its own model", file_line(parallel), FIX_DATA_PARALLEL)
    if not ddps:
        return ("no DistributedDataParallel wraps the model on this path: no gradient is "
                "all-reduced, each rank steps on its own", file_line(step_record),
                FIX_WRAP)
    if replica.root is None and replica.in_ddp < replica.params:
        return (f"{replica.params - replica.in_ddp} of the {replica.params} parameters the "
                "optimizer steps are in no DDP's module (made after the wrap, or a second "
                "model): DDP all-reduces only the gradients of the module it wraps",
                file_line(step_record), FIX_OUTSIDE)
    if step_record is not None and step_record.micro_count == 0 \
            and step_record.backward_count > 0:
        spot = file_line(bypass) if bypass else file_line(step_record)
        return (f"no forward before step {step} went through the DDP"
                + (f" (the {bypass.module} it wraps runs on its own at {place(*spot)})"
                   if bypass else "")
                + ": DDP all-reduces the gradients only of a backward after its own forward, "
                  "so each rank steps on its own gradients", spot, FIX_FORWARD)
    if root is not None and root.kind == "plain":
        return (f"the {root.module} first run at {place(*file_line(root))} is not the module "
                "DDP wraps (a copy made before the wrap, or a model trained outside DDP): DDP "
                "broadcasts rank 0's parameters only into the module it wraps",
                file_line(root), FIX_COPY)
    if len({len(v) for v in loads.values()}) > 1:
        loaded = [r for r, v in loads.items() if v]
        record = loads[loaded[0]][0]
        return (f"rank {loaded[0]} loads a state dict at {place(*file_line(record))} after "
                "DDP's construction and the other ranks do not", file_line(record), FIX_LOAD)
    lrs = _differing_lrs(evidence, step)
    if lrs is not None:
        at, per_rank = lrs
        listed = " against ".join(f"{', '.join(map(number, lr))} on rank {r}"
                                  for r, lr in sorted(per_rank.items()))
        record = next(s for s in evidence.records(records.Step) if s.number == at)
        return (f"the learning rates differ between ranks from step {at} ({listed}): a "
                "scheduler stepped, or an LR set, on some ranks only, so DDP's averaged "
                "gradients move each replica by a different amount", file_line(record), FIX_LR)
    return ("the ranks' gradients or optimizer states differ", file_line(step_record), None)


def _differing_lrs(evidence, until: int):
    """(step, rank -> its learning rates) of the first step up to ``until`` whose learning
    rates differ between ranks, or None."""
    per_rank = {r: {s.number: s.lr for s in evidence.records(records.Step, r) if s.lr}
                for r in evidence.ranks}
    for at in range(1, until + 1):
        lrs = {r: steps[at] for r, steps in per_rank.items() if at in steps}
        if len(lrs) > 1 and len({tuple(v) for v in lrs.values()}) > 1:
            return at, lrs
    return None


def replicas_diverge(evidence, earlier):
    if (evidence.world_size or 0) < 2:
        return not_applicable("one rank")
    if not evidence.records(records.Replica):
        return not_applicable("no optimizer step was taken")
    if earlier.found("accumulation-unsynced-step"):
        return not_applicable("explained by accumulation-unsynced-step: the replicas step "
                              "with different gradients")
    failed = next(iter(earlier.explaining()), None) if evidence.crashed() else None
    if failed is not None:
        return not_applicable(f"the run failed as {failed.id} says: DDP's own failure leaves "
                              "its gradients unreduced, and the replicas are not compared")
    first = _first_difference(evidence)
    if first is None:
        steps = max(r.step for r in evidence.records(records.Replica))
        return passed(f"every parameter the optimizer steps (and every unshared buffer) is "
                      f"equal on every rank after each of {steps} steps")
    replica, name, values, equal_after = first
    step = replica.step
    what = values[evidence.ranks[0]][3]
    numbers = ", ".join(f"rank {r}: sum {number(v[1])}" for r, v in sorted(values.items())
                        if v is not None)
    root = next((r for r in evidence.records(records.Root) if r.index == replica.root), None)
    optimizer = next((o for o in evidence.records(records.Optimizer)
                      if o.index == replica.optimizer), None)
    owner = (f"of the {root.module}" if root is not None else
             f"stepped by the {optimizer.type} made at {place(*file_line(optimizer))}"
             if optimizer is not None else "stepped by the optimizer")
    cause, where_, fix = _cause(evidence, replica, what, step)
    return found(Problem(
        f"the {what} {name} {owner} differs between ranks after step {step} "
        f"({numbers}{f'; equal after step {equal_after}' if equal_after else ''}): {cause}",
        {"step": step, "tensor": name, "what": what,
         "module": root.module if root is not None else None,
         "per_rank": {r: {"sum": v[1], "norm": v[2]} for r, v in values.items() if v}},
        *where_, fix=fix))


def _names(names: list) -> str:
    return f"{', '.join(names[:4])}{' ...' if len(names) > 4 else ''}"


def find_unused_parameters(evidence, earlier):
    models = evidence.records(records.Ddp)
    if not models:
        return not_applicable("no DistributedDataParallel model")
    problems, seen, unchecked = [], [], []
    for ddp in models:
        where = place(*file_line(ddp))
        checked = [u for u in evidence.all(records.Unused) if u.record.ddp == ddp.index]
        unused = sorted({n for u in checked for n in u.record.names})
        if ddp.static_graph:
            seen.append(f"DDP at {where} has static_graph=True, which finds the parameters that "
                        "get no gradient itself"
                        + (f" ({_names(unused)} got none)" if unused else ""))
            continue
        if not checked:
            unchecked.append(f"no backward through DDP at {where} was checked")
            continue
        on = len({u.rank for u in checked})
        backwards = f"the {len(checked)} backwards checked (on {on} rank{'s' * (on > 1)})"
        if not ddp.find_unused and unused:
            ranks = sorted({u.rank for u in checked if u.record.names})
            problems.append(Problem(
                f"{_names(unused)} got no gradient in "
                f"a backward on rank{'s' if len(ranks) > 1 else ''} "
                f"{', '.join(map(str, ranks))}, and DDP at {where} has "
                "find_unused_parameters=False: it waits for their gradients and fails at the "
                "next forward (\"Expected to have finished reduction in the prior iteration\")",
                {"unused": unused, "ranks": ranks}, *file_line(ddp)))
        elif ddp.find_unused and not unused:
            problems.append(Problem(
                f"DDP at {where} has find_unused_parameters=True, but every "
                f"parameter got a gradient in each of {backwards}: after each "
                "forward DDP walks the autograd graph and all-reduces a map of unused "
                "parameters for nothing",
                {"backwards_checked": len(checked)}, *file_line(ddp), kind="waste",
                fix="model = DDP(model, device_ids=[local_rank])  # "
                    "find_unused_parameters=False, the default"))
        elif unused:
            seen.append(f"{_names(unused)} got no gradient in some of {backwards}, and DDP at "
                        f"{where} has find_unused_parameters=True")
        else:
            seen.append(f"every parameter of DDP at {where} got a gradient in each of "
                        f"{backwards}, and it has find_unused_parameters=False")
    if problems:
        return found(*problems)
    if not seen:
        return not_applicable("; ".join(unchecked))
    return passed("find_unused_parameters matches the model: " + "; ".join(seen + unchecked))


FIX_UNUSED = """\
model = DDP(model, device_ids=[local_rank], find_unused_parameters=True)
# or take the parameters that get no gradient out of the model"""


FIX_REPLICAS = """\
model = DDP(model, device_ids=[local_rank])  # all ranks start from rank 0's parameters
# and afterwards change them only through the optimizer, on every rank alike"""


FIND_UNUSED_PARAMETERS = Check(
    "find-unused-parameters", "error",
    "find_unused_parameters matches the model: True exactly when a parameter gets no "
    "gradient",
    "hangs-unused-parameters",
    FIX_UNUSED, find_unused_parameters,
    explains=Crashes(texts=("Expected to have finished reduction",)), also=("waste",))


REPLICAS_DIVERGE = Check(
    "replicas-diverge", "error",
    "every parameter (and every buffer DDP does not re-broadcast) is equal on all ranks "
    "after each step",
    "hangs-batchnorm",
    FIX_REPLICAS, replicas_diverge,
    defers_to=('accumulation-unsynced-step',), reads_explanations=True)
