"""Device checks: ``cpu-tensor-nccl`` (a CPU tensor or model where NCCL needs the GPU) and
``ranks-share-gpu`` (the ranks of one node on one GPU)."""

from __future__ import annotations

import ddplab.doctor.records as records
from ddplab.doctor.judging.check import Check, Crashes
from ddplab.doctor.judging.findings import place
from ddplab.doctor.judging.judgement import (
    Problem,
    file_line,
    found,
    not_applicable,
    passed,
    ranks_text,
)


def cpu_tensor_nccl(evidence, earlier):
    """Under a group that asked for NCCL, a collective's tensor or DDP's model on the CPU."""
    requested = {g.requested for g in evidence.records(records.GroupInit)}
    nccl = [c for c in evidence.records(records.Collective) if c.nccl and not c.by]
    models = [d for d in evidence.records(records.Ddp) if d.nccl]
    if not nccl and not models:
        asked = ", ".join(map(str, requested)) or "no backend"
        return not_applicable(f"the script asked for {asked}, not NCCL")
    problems, seen = [], set()
    # DDP's constructor first all-gathers the parameters' shapes
    # (_verify_param_shape_across_processes, torch/nn/parallel/distributed.py:1064 in torch
    # 2.13), then broadcasts rank 0's parameters (_sync_module_states)
    for d in models:
        if "cpu" in d.devices:
            problems.append(Problem(
                f"DDP at {place(*file_line(d))} wraps a model whose parameters are on the CPU, "
                f"in a group that asked for NCCL: NCCL takes CUDA tensors only, and DDP's "
                "first collective fails there (the all-gather that compares the parameters' "
                "shapes, before their broadcast)"
                + ("" if evidence.used_backend() == "nccl" else
                   f" (this run used {evidence.used_backend()}: no GPU here)"),
                {"devices": d.devices, "requested": d.requested}, *file_line(d)))
    for c in nccl:
        if "cpu" in c.devices and (c.file, c.line) not in seen:
            seen.add((c.file, c.line))
            problems.append(Problem(
                f"{c.op} at {place(*file_line(c))} gets a CPU tensor in a group that asked for "
                "NCCL: there it raises \"No backend type associated with device type cpu\""
                + ("" if evidence.used_backend() == "nccl" else
                   f" (this run used {evidence.used_backend()}: no GPU here)"),
                {"op": c.op, "devices": c.devices, "dtype": c.dtype,
                 "requested": c.requested}, *file_line(c)))
    if problems:
        return found(*problems)
    return passed(f"{len(nccl)} collectives under NCCL, every tensor on the GPU")


def ranks_share_gpu(evidence, earlier):
    """Ranks of one node whose every tensor and module went to the same GPU: the doctor maps
    CUDA onto the CPU here and records which index each rank used."""
    if (evidence.world_size or 0) < 2:
        return not_applicable("one rank")
    used = {r: evidence.records(records.CudaIndex, r) for r in evidence.ranks}
    used = {r: u for r, u in used.items() if u}
    if len(used) < 2:
        return not_applicable("no CUDA was mapped onto the CPU (each rank had a GPU, or the "
                              "script asked for none)")
    nodes = {}
    for rank, placed in used.items():
        nodes.setdefault(evidence.by_rank[rank].host, {})[rank] = placed
    nccl = "nccl" in (evidence.requested_backend() or "")
    problems, seen = [], []
    for per_rank in nodes.values():
        indices = {r: sorted({c.index for c in placed}) for r, placed in per_rank.items()}
        seen += [f"rank {r}: cuda:{', cuda:'.join(map(str, i))}" for r, i in indices.items()]
        alone = {}
        for rank, own in sorted(indices.items()):
            if len(own) == 1:
                alone.setdefault(own[0], []).append(rank)
        for index, ranks in sorted(alone.items()):
            if len(ranks) < 2:
                continue
            first = per_rank[ranks[0]][0]
            set_device = any(c.set_device for r in ranks for c in per_rank[r])
            problems.append(Problem(
                f"{ranks_text(ranks)} of one node put every tensor and module on cuda:{index} "
                f"(first at {place(*file_line(first))}; "
                + ("each process sets that same device" if set_device else
                   "torch.cuda.set_device is never called, so \"cuda\" is GPU 0 in every "
                   "process")
                + "): "
                + ("NCCL refuses two ranks on one GPU when it forms its communicator, at the "
                   "first collective (\"Duplicate GPU detected\")" if nccl else
                   "the ranks share one GPU's memory and compute, and the node's other GPUs "
                   "stay idle"),
                {"index": index, "ranks": ranks, "indices": indices,
                 "set_device": set_device, "requested": evidence.requested_backend()},
                *file_line(first), kind=None if nccl else "waste"))
    if problems:
        return found(*problems)
    return passed("each rank of a node used a GPU of its own (" + "; ".join(seen) + ")")


FIX_DEVICE = """\
device = torch.device("cuda", local_rank)
torch.cuda.set_device(device)
model = DDP(model.to(device), device_ids=[local_rank])
counts = torch.tensor([correct, total], device=device)  # the rank's GPU, not the CPU
dist.all_reduce(counts)
# on a machine without GPUs: dist.init_process_group("gloo")"""


CPU_TENSOR_NCCL = Check(
    "cpu-tensor-nccl", "error",
    "under NCCL, every collective's tensor and DDP's model are on the GPU",
    "errors-no-backend-cpu",
    FIX_DEVICE, cpu_tensor_nccl,
    explains=Crashes(texts=("No backend type associated with device type cpu",
                            "Tensors must be CUDA")))


FIX_ONE_GPU = """\
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)  # first: "cuda" is this rank's GPU from now on
device = torch.device("cuda", local_rank)
model = DDP(model.to(device), device_ids=[local_rank])"""


RANKS_SHARE_GPU = Check(
    "ranks-share-gpu", "error",
    "each rank of a node puts its tensors and model on a GPU of its own",
    "errors-duplicate-gpu",
    FIX_ONE_GPU, ranks_share_gpu,
    explains=Crashes(texts=("Duplicate GPU detected",)), also=("waste",))
