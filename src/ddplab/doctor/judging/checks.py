"""Every check the doctor runs, one record each, in one tuple (the shape of torchtitan's
``train_spec``): its id, its kind, what it checks, the book's section that shows the pitfall,
the fix as code, and the judge that reads the run's evidence. The order is the order of the
report; a judge may read the findings of the checks before it (``replicas-diverge`` leaves
out what an unsynchronised step explains; ``hang`` comes last)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ddplab.doctor.judging import error_index
from ddplab.doctor.judging.findings import BOOK, Finding, Verdict
from ddplab.doctor.judging.judges import (
    accumulation,
    collectives,
    crash,
    data,
    files,
    group,
    metric,
    model,
    optimizer,
    printed,
    reference,
    schedules,
    shards,
    state_dict,
)

SECTIONS = {  # label -> the page it stands on; its section opens at BOOK + page.html#label
    "averaging-naive": "averaging",
    "time-cost-slower": "time_cost",
    "sharding-shuffling": "sharding",
    "sharding-no-sampler": "sharding",
    "hangs-rank0-collective": "hangs",
    "errors-no-backend-cpu": "errors",
    "training-loop-mixed-precision": "training_loop",
    "training-loop-evaluation": "training_loop",
    "training-loop-printing": "training_loop",
    "time-cost-accumulation": "time_cost",
    "hangs-batchnorm": "hangs",
    "hangs-checkpoints": "hangs",
    "hangs-unused-parameters": "hangs",
    "hangs-uneven": "hangs",
    "lr-scaling-rules": "lr_scaling",
    "lr-scaling-schedule-length": "lr_scaling",
    "hangs": "hangs",
    "running-torchrun": "running",
    "errors": "errors",
    **{entry.label: "errors" for entry in error_index.ENTRIES},
    error_index.NO_GROUP: "errors",
}


def url_of(section: str) -> str:
    # Sphinx gives a label's target its own id, so the label is the anchor: a heading
    # reworded keeps it (a heading's own slug would change, and differs from GitHub's)
    return f"{BOOK}{SECTIONS[section]}.html#{section}"


@dataclasses.dataclass(frozen=True)
class Check:
    id: str
    kind: str  # of its findings, unless a finding says otherwise
    checks: str  # what it checks, in a sentence
    section: str  # the label of the book's section that shows the pitfall
    fix: str  # the change, as code
    judge: Callable
    explains_hang: bool = False  # its finding, if any, is why a run hung
    explains_crash: tuple = ()  # error texts its finding explains ("" explains any)

    @property
    def url(self) -> str:
        return url_of(self.section)


FIX_SET_EPOCH = """\
for epoch in range(num_epochs):
    # before iterating: a new order each epoch, the same on all ranks
    sampler.set_epoch(epoch)
    for x, y in loader:
        ..."""
FIX_SAMPLER = """\
sampler = DistributedSampler(dataset)  # each rank: len(dataset) / world_size samples
# the sampler shuffles: no shuffle=True here
loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)"""
FIX_EVERY_RANK = """\
dist.all_reduce(loss_sum)  # every rank calls the collective
if dist.get_rank() == 0:  # only the printing is rank 0's
    print(loss_sum.item() / dist.get_world_size())"""
FIX_DEVICE = """\
device = torch.device("cuda", local_rank)
torch.cuda.set_device(device)
model = DDP(model.to(device), device_ids=[local_rank])
counts = torch.tensor([correct, total], device=device)  # the rank's GPU, not the CPU
dist.all_reduce(counts)
# on a machine without GPUs: dist.init_process_group("gloo")"""
FIX_UNSCALE = """\
scaler.scale(loss).backward()
scaler.unscale_(optimizer)  # the true gradients, before clipping them
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
scaler.step(optimizer)
scaler.update()"""
FIX_METRIC = """\
sums = torch.tensor([correct, count], dtype=torch.float64, device=device)
dist.all_reduce(sums)  # the sums and the counts, not each rank's mean
accuracy = (sums[0] / sums[1]).item()
# and an unpadded shard: Subset(val_set, range(rank, len(val_set), world_size))"""
FIX_NO_SYNC = """\
for i, (x, y) in enumerate(micro_batches):
    last = i == len(micro_batches) - 1
    # all-reduce once, at the last
    with contextlib.nullcontext() if last else model.no_sync():
        loss = loss_fn(model(x), y) / len(micro_batches)
        loss.backward()
optimizer.step()"""
FIX_DIVIDE = """\
# the mean of the micro-batches' gradients
loss = loss_fn(model(x), y) / accumulation_steps
loss.backward()"""
FIX_REPLICAS = """\
model = DDP(model, device_ids=[local_rank])  # all ranks start from rank 0's parameters
# and afterwards change them only through the optimizer, on every rank alike"""
FIX_WRITES = """\
if dist.get_rank() == 0:  # one writer: the other ranks' copy is the same
    torch.save(model.module.state_dict(), path)
dist.barrier()  # the others wait until the file is complete before they read it"""
FIX_UNUSED = """\
model = DDP(model, device_ids=[local_rank], find_unused_parameters=True)
# or take the parameters that get no gradient out of the model"""
FIX_UNEVEN = """\
# a DistributedSampler gives every rank as many samples: by default (drop_last=False) it
# pads by repeating the first samples of the epoch's order, which then count twice;
# drop_last=True leaves len(dataset) % world_size samples out of each epoch instead
sampler = DistributedSampler(dataset)
# or keep unequal shards and let DDP shadow the missing all-reduces:
with model.join():
    for x, y in loader:
        ..."""
FIX_LR = """\
# linear scaling with the global batch (with a warmup)
lr = base_lr * dist.get_world_size()
# or keep the global batch fixed:
# batch_size = global_batch_size // dist.get_world_size()"""
FIX_REDUCED_ONCE = """\
loss.backward()  # DDP all-reduces and averages the gradients here
# no loop of dist.all_reduce(p.grad) after it: that is DDP's job, done once
optimizer.step()"""
FIX_NO_BARRIER = """\
for step, (x, y) in enumerate(loader):
    ...  # no dist.barrier() here: DDP's backward already synchronises the ranks
    if step % log_every == 0:  # reduce the numbers to log now and then, not every step
        dist.all_reduce(loss_sum)"""
FIX_LOG_MEAN = """\
dist.all_reduce(loss_value, op=dist.ReduceOp.SUM)
loss_value /= dist.get_world_size()  # the mean over the ranks, as one process prints it
# or: dist.all_reduce(loss_value, op=dist.ReduceOp.AVG)"""
FIX_HANG = """\
# every rank must call the same collectives in the same order: move the collective
# out of any `if rank == ...` branch, and give every rank the same number of batches"""

FIX_KNOWN = """\
# each entry of the book's error index says what to change, as code"""
FIX_RANK = """\
# no rank= or world_size=: torchrun's RANK and WORLD_SIZE, one rank per process
dist.init_process_group()  # or keep the backend your script names: ("gloo"), ("nccl")
# with none, torch 2.13 takes NCCL where there is a GPU, gloo where there is none
local_rank = int(os.environ["LOCAL_RANK"])  # this process's GPU on its node, if any"""

CHECKS = (
    Check("duplicate-rank", "error",
          "each process passes init_process_group a rank of its own",
          "running-torchrun", FIX_RANK, group.duplicate_rank,
          explains_crash=("",)),
    Check("sampler-set-epoch", "error",
          "a shuffling DistributedSampler gives a new order in each training epoch",
          "sharding-shuffling", FIX_SET_EPOCH, data.sampler_set_epoch),
    Check("no-distributed-sampler", "error",
          "each rank trains on its own shard, not on the whole dataset",
          "sharding-no-sampler", FIX_SAMPLER, data.no_distributed_sampler),
    Check("different-datasets", "error",
          "a sharded training loader holds the same dataset on every rank",
          "sharding-no-sampler", shards.FIX_ONE_SPLIT, shards.different_datasets),
    Check("overlapping-shards", "error",
          "within an epoch, the ranks' DistributedSampler shards share no sample beyond the "
          "padding", "sharding-shuffling", shards.FIX_SAME_SEED, shards.overlapping_shards),
    Check("same-batches", "error",
          "the ranks' DDP forwards get different batches",
          "sharding-no-sampler", shards.FIX_SEED, shards.same_batches),
    Check("uneven-inputs", "error",
          "every rank's training loader has the same number of batches",
          "hangs-uneven", FIX_UNEVEN, data.uneven_inputs, explains_hang=True,
          explains_crash=("",)),
    Check("collective-on-some-ranks", "error",
          "every rank calls the same collectives, in the same order",
          "hangs-rank0-collective", FIX_EVERY_RANK, collectives.collective_on_some_ranks,
          explains_hang=True, explains_crash=("",)),
    Check("cpu-tensor-nccl", "error",
          "under NCCL, every collective's tensor and DDP's model are on the GPU",
          "errors-no-backend-cpu", FIX_DEVICE, collectives.cpu_tensor_nccl,
          explains_crash=("No backend type associated with device type cpu",
                          "Tensors must be CUDA")),
    Check("find-unused-parameters", "error",
          "find_unused_parameters matches the model: True exactly when a parameter gets no "
          "gradient", "hangs-unused-parameters", FIX_UNUSED, model.find_unused_parameters,
          explains_crash=("Expected to have finished reduction",)),
    Check("accumulation-no-sync", "waste",
          "micro-steps before the last run under no_sync (one all-reduce per optimizer step)",
          "time-cost-accumulation", FIX_NO_SYNC, accumulation.accumulation_no_sync),
    Check("accumulation-unsynced-step", "error",
          "the last micro-step before an optimizer step synchronises the gradients",
          "time-cost-accumulation", FIX_NO_SYNC, accumulation.accumulation_unsynced_step),
    Check("accumulation-loss-not-divided", "error",
          "with k micro-steps per step, the loss given to backward is divided by k",
          "time-cost-accumulation", FIX_DIVIDE,
          accumulation.accumulation_loss_not_divided),
    Check("replicas-diverge", "error",
          "every parameter (and every buffer DDP does not re-broadcast) is equal on all ranks "
          "after each step", "hangs-batchnorm", FIX_REPLICAS, model.replicas_diverge),
    Check("gradients-reduced-twice", "waste",
          "the script does not all-reduce gradients DDP has already all-reduced",
          "averaging-naive", FIX_REDUCED_ONCE, collectives.gradients_reduced_twice),
    Check("barrier-every-step", "waste",
          "the training loop does not wait in a barrier before every optimizer step",
          "time-cost-slower", FIX_NO_BARRIER, collectives.barrier_every_step),
    Check("clip-before-unscale", "error",
          "gradients are clipped after GradScaler.unscale_, not while still scaled",
          "training-loop-mixed-precision", FIX_UNSCALE, optimizer.clip_before_unscale),
    Check("metric-mean-of-means", "error",
          "an evaluation metric is reduced from sums and counts, over unpadded shards",
          "training-loop-evaluation", FIX_METRIC, metric.metric_mean_of_means),
    Check("logged-sum-not-divided", "error",
          "a printed mean over the ranks is the all-reduced sum divided by the world size",
          "averaging-naive", FIX_LOG_MEAN, printed.logged_sum_not_divided),
    Check("mean-over-global-count", "error",
          "a loss a rank summed over its shard is printed divided by the rank's count, not "
          "the whole dataset's", "training-loop-printing", printed.FIX_GLOBAL_COUNT,
          printed.mean_over_global_count),
    Check("every-rank-writes", "error",
          "each file is written by one rank only",
          "hangs-checkpoints", FIX_WRITES, files.every_rank_writes,
          explains_crash=("FileExistsError",)),
    Check("lr-not-scaled", "advisory",
          "the LR follows the global batch when the global batch grows with the world size",
          "lr-scaling-rules", FIX_LR, optimizer.lr_not_scaled),
    Check("schedule-length", "error",
          "a learning-rate schedule's length is the steps each rank's loader gives, not the "
          "whole dataset's", "lr-scaling-schedule-length", schedules.FIX_LENGTH,
          schedules.schedule_length),
    Check("no-process-group", "error",
          "a script run as torchrun runs it joins a process group",
          error_index.NO_GROUP, error_index.FIX_LOCAL_RANK, group.no_process_group),
    Check("known-crash", "error",
          "a crash no check above explains, looked up in the book's error index",
          "errors", FIX_KNOWN, crash.known_crash, explains_crash=("",)),
    Check("state-dict-prefix", "advisory",
          "a saved state dict has the model's own names, not DDP's 'module.' ones",
          "errors-state-dict-prefix", error_index.FIX_PREFIX, state_dict.state_dict_prefix),
    Check("reference-differs", "error",
          "the ranks train as one process does on the same samples: parameters, learning "
          "rates and printed numbers, step by step", "averaging-naive", reference.FIX,
          reference.reference_differs),
    Check("hang", "error",
          "no rank waits longer than the timeout in a collective, a backward or DDP's "
          "construction", "hangs", FIX_HANG, collectives.hang),
)


def judge(evidence) -> list[Verdict]:
    """Every check on ``evidence``, in order."""
    crash = evidence.crashed()
    verdicts, earlier = [], []
    for check in CHECKS:
        judgement = check.judge(evidence, earlier)
        findings = []
        for problem in judgement.problems:
            explains = bool((check.explains_hang and evidence.run.hang)
                            or (crash and any(text in (crash.get("error") or "")
                                              or text in (crash.get("traceback") or "")
                                              for text in check.explains_crash)))
            message, about = problem.message, problem.evidence
            if explains and evidence.hung():  # say where every rank is
                hang = evidence.run.hang
                message += ". The run hung: " + collectives.describe_hang(
                    evidence, hang["alarm"], hang["positions"])
                about = dict(about, hang=hang)
            findings.append(Finding(
                id=check.id, kind=problem.kind or check.kind, message=message,
                evidence=about, file=problem.file, line=problem.line,
                section=problem.section or check.section,
                url=url_of(problem.section or check.section), fix=problem.fix or check.fix,
                explains=explains))
        earlier.extend(findings)
        verdicts.append(Verdict(check.id, check.kind, judgement.status, judgement.why,
                                findings))
    return verdicts
