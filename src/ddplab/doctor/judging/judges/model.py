"""The model's replicas: ``replicas-diverge`` (a parameter or buffer that differs between
ranks after a step) and ``find-unused-parameters`` (either direction)."""

from __future__ import annotations

import ddplab.doctor.records as records
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


def _first_difference(evidence):
    """(step, root, name, per-rank summary) of the first tensor that differs, or None."""
    per_rank = {r: evidence.records(records.Replica, r) for r in evidence.ranks}
    count = min(len(v) for v in per_rank.values())
    equal_after = {}  # root -> the last step it was compared equal
    for i in range(count):
        at = {r: v[i] for r, v in per_rank.items()}
        base = at[evidence.ranks[0]]
        for name, (digest, *_rest) in base.tensors.items():
            values = {r: a.tensors.get(name) for r, a in at.items()}
            if any(v is None or v[0] != digest for v in values.values()):
                return base.step, base.root, name, values, equal_after.get(base.root)
        equal_after[base.root] = base.step
    return None


def replicas_diverge(evidence, earlier):
    if (evidence.world_size or 0) < 2:
        return not_applicable("one rank")
    if not evidence.records(records.Replica):
        return not_applicable("no optimizer step was taken")
    if any(f.id == "accumulation-unsynced-step" for f in earlier):
        return not_applicable("explained by accumulation-unsynced-step: the replicas step "
                              "with different gradients")
    first = _first_difference(evidence)
    if first is None:
        steps = max(r.step for r in evidence.records(records.Replica))
        return passed(f"every parameter (and unshared buffer) is equal on every rank after "
                      f"each of {steps} steps")
    step, root_index, name, values, equal_after = first
    root = next(r for r in evidence.records(records.Root) if r.index == root_index)
    what = values[evidence.ranks[0]][3]
    numbers = ", ".join(f"rank {r}: sum {number(v[1])}" for r, v in sorted(values.items())
                        if v is not None)
    ddp = next((d for d in evidence.records(records.Ddp) if d.index == root.ddp), None)
    loads = {r: [x for x in evidence.records(records.LoadStateDict, r) if x.after_wrap]
             for r in evidence.ranks}
    if ddp and what == "buffer" and not ddp.broadcast_buffers:
        cause, where_, fix = (f"DDP at {place(*file_line(ddp))} syncs no buffers "
                              "(forward_sync_buffers=False, or broadcast_buffers=False, its "
                              "name before torch 2.13): each rank keeps its own running "
                              "statistics", file_line(ddp), FIX_BUFFERS)
    elif root.kind == "plain":
        cause, where_, fix = (f"the {root.module} first run at {place(*file_line(root))} is not "
                              "the module DDP wraps (a copy made before the wrap, or a model "
                              "trained outside DDP): DDP broadcasts rank 0's parameters only "
                              "into the module it wraps", file_line(root), FIX_COPY)
    elif len({len(v) for v in loads.values()}) > 1:
        loaded = [r for r, v in loads.items() if v]
        record = loads[loaded[0]][0]
        cause, where_, fix = (f"rank {loaded[0]} loads a state dict at {place(*file_line(record))} "
                              "after DDP's construction and the other ranks do not",
                              file_line(record), FIX_LOAD)
    else:
        cause, where_, fix = ("the ranks' gradients or optimizer states differ", (None, None),
                              None)
        step_record = next((s for s in evidence.records(records.Step) if s.number == step), None)
        if step_record:
            where_ = file_line(step_record)
    return found(Problem(
        f"the {what} {name} of the {root.module} differs between ranks after step {step} "
        f"({numbers}{f'; equal after step {equal_after}' if equal_after else ''}): {cause}",
        {"step": step, "tensor": name, "what": what, "module": root.module,
         "per_rank": {r: {"sum": v[1], "norm": v[2]} for r, v in values.items() if v}},
        *where_, fix=fix))


def find_unused_parameters(evidence, earlier):
    models = evidence.records(records.Ddp)
    if not models:
        return not_applicable("no DistributedDataParallel model")
    problems = []
    for ddp in models:
        if ddp.static_graph:
            continue
        checked = [u for u in evidence.all(records.Unused) if u.record.ddp == ddp.index]
        if not checked:
            continue
        unused = sorted({n for u in checked for n in u.record.names})
        if not ddp.find_unused and unused:
            ranks = sorted({u.rank for u in checked if u.record.names})
            problems.append(Problem(
                f"{', '.join(unused[:4])}{' ...' if len(unused) > 4 else ''} got no gradient in "
                f"a backward on rank{'s' if len(ranks) > 1 else ''} "
                f"{', '.join(map(str, ranks))}, and DDP at {place(*file_line(ddp))} has "
                "find_unused_parameters=False: it waits for their gradients and fails at the "
                "next forward (\"Expected to have finished reduction in the prior iteration\")",
                {"unused": unused, "ranks": ranks}, *file_line(ddp)))
        elif ddp.find_unused and not unused:
            problems.append(Problem(
                f"DDP at {place(*file_line(ddp))} has find_unused_parameters=True, but every "
                f"parameter got a gradient in each of the {len(checked)} backwards checked "
                f"(on {len({u.rank for u in checked})} ranks): after each "
                "forward DDP walks the autograd graph and all-reduces a map of unused "
                "parameters for nothing",
                {"backwards_checked": len(checked)}, *file_line(ddp), kind="waste",
                fix="model = DDP(model, device_ids=[local_rank])  # "
                    "find_unused_parameters=False, the default"))
    if problems:
        return found(*problems)
    return passed("find_unused_parameters matches the model: "
                  + ("every parameter got a gradient" if not any(m.find_unused
                                                                 for m in models)
                     else "some parameters got no gradient"))
