"""Each judge on hand-built records (``judge_records``), one test per branch, in milliseconds:
what the corpus runs prove is recorded, these prove is judged. The tests of a judge module
``judges/<family>.py`` are in ``test_doctor_judges_<family>.py``; a branch that only a real
run reaches is named there and in the corpus test."""

from __future__ import annotations

import dataclasses
import importlib
import pathlib
import pkgutil

import pytest

from ddplab.doctor.judging import judges
from ddplab.doctor.judging.check import Check
from ddplab.doctor.judging.checks import CHECKS
from ddplab.doctor.judging.findings import Finding, Status
from ddplab.doctor.judging.judgement import Earlier
from ddplab.doctor.judging.judges import (
    collectives,
    data,
    devices,
    files,
    model,
    shards,
    state_dict,
)
from ddplab.doctor.messages import Crash, Done
from ddplab.doctor.records import (
    Collective,
    CudaIndex,
    CustomOrder,
    Ddp,
    DdpCall,
    GroupInit,
    Loader,
    MicroStep,
    Outcome,
    Pass,
    Read,
    Replica,
    Root,
    SamplerOrder,
    SetEpoch,
    Step,
    Write,
)
from judge_records import evidence, judge


def test_every_check_is_judged_in_a_millisecond_test():
    """Each record of ``CHECKS`` is handed to ``judge`` by a test of these files, named as its
    module and constant (``data.SAMPLER_SET_EPOCH``); most families have a file of their own."""
    here = pathlib.Path(__file__).parent
    tests = "".join(p.read_text() for p in here.glob("test_doctor_judges*.py"))
    named = {}
    for module in pkgutil.iter_modules(judges.__path__):
        found = importlib.import_module(f"{judges.__name__}.{module.name}")
        named.update({id(v): f"{module.name}.{k}" for k, v in vars(found).items()
                      if isinstance(v, Check)})
    untested = [c.id for c in CHECKS if f"judge({named[id(c)]}," not in tests]
    assert len(CHECKS) >= 30 and untested == []


def loader(**changes) -> Loader:
    fields = dict(index=0, file="train.py", line=20, dataset="TensorDataset", dataset_len=64,
                  fingerprint="f", iterable=False, sampler="DistributedSampler",
                  distributed=True, sampler_len=32, batch_size=8, drop_last=False, iterations=2)
    return Loader(**{**fields, **changes})


def training_pass(number: int, **changes) -> Pass:
    fields = dict(loader=0, number=number, len=4, file="train.py", line=30, batches=4,
                  samples=32, training=True, first=f"batch{number}")
    return Pass(**{**fields, **changes})


def order(number: int, digest: str, epoch: int = 0) -> SamplerOrder:
    return SamplerOrder(sampler=0, epoch=epoch, shuffle=True, seed=0, drop_last=False,
                        num_replicas=2, sampler_rank=0, dataset_len=64, total_size=64,
                        first=[5, 3, 9], count=32, digest=digest, loader=0, pass_number=number)


def epochs(digests, set_epoch=()):
    seen = [loader()]
    for number, digest in enumerate(digests):
        seen += [*set_epoch[number:number + 1], order(number, digest, epoch=number
                                                         if set_epoch else 0),
                 training_pass(number)]
    return evidence({0: seen, 1: seen})


def test_sampler_set_epoch_found_when_two_epochs_repeat_one_order():
    got = judge(data.SAMPLER_SET_EPOCH, epochs(["same", "same"]))
    assert got.status == Status.FOUND
    assert "set_epoch is never called" in got.problems[0].message
    assert got.problems[0].line == 30  # the second epoch's loop


def test_sampler_set_epoch_names_a_call_that_sets_one_epoch():
    calls = [SetEpoch(sampler=0, epoch=0, file="train.py", line=28)] * 2
    got = judge(data.SAMPLER_SET_EPOCH, epochs(["same", "same"], set_epoch=calls))
    assert got.status == Status.FOUND and "set_epoch(0) at train.py:28" in got.why


def test_sampler_set_epoch_points_at_a_call_made_after_the_loop():
    """set_epoch(e) after epoch e's loop: the iterator was made with the epoch before, so two
    epochs give one order; the finding is at the call, not at the loop."""
    calls = [SetEpoch(sampler=0, epoch=e, file="train.py", line=41) for e in (0, 1)]
    got = judge(data.SAMPLER_SET_EPOCH, epochs(["same", "same"], set_epoch=calls))
    assert got.status == Status.FOUND and got.problems[0].line == 41
    assert "after the loader's iterator was made" in got.why


def test_sampler_set_epoch_passes_when_the_order_changes():
    assert judge(data.SAMPLER_SET_EPOCH, epochs(["a", "b"])).status == Status.PASSED


def test_sampler_set_epoch_not_judged_within_one_epoch():
    """One epoch cannot show it either way: listed as not judged, not as not applicable."""
    got = judge(data.SAMPLER_SET_EPOCH, epochs(["a"]))
    assert got.status == Status.NOT_JUDGED and "one training epoch ran" in got.why


def test_a_judge_reads_only_the_checks_its_record_names():
    """``earlier`` refuses what the record does not declare, and gives what it does."""
    prefix = Finding("known-crash", "error", "m", {}, None, None, "errors-state-dict-prefix",
                     "u", "fix")
    with pytest.raises(ValueError, match="defers_to"):
        Earlier([prefix], data.SAMPLER_SET_EPOCH).found("known-crash")
    with pytest.raises(ValueError, match="reads_explanations"):
        Earlier([prefix], data.SAMPLER_SET_EPOCH).explaining()
    assert Earlier([prefix], state_dict.STATE_DICT_PREFIX).found("known-crash") == [prefix]


def on_gpus(indices: dict, backend: str = "nccl", set_device: bool = False):
    """Each rank's GPU indices, under a group that asked for ``backend``."""
    group = GroupInit(requested=backend, used="gloo", backend="gloo", world_size=2)
    return evidence({r: [group, *(CudaIndex(index=i, set_device=set_device, file="train.py",
                                            line=12) for i in own)]
                     for r, own in indices.items()})


def test_ranks_share_gpu_found_when_every_rank_is_on_gpu_0():
    got = judge(devices.RANKS_SHARE_GPU, on_gpus({0: [0], 1: [0]}))
    assert got.status == Status.FOUND and got.problems[0].kind is None  # the check's: error
    said = got.problems[0].message
    assert "ranks 0, 1 of one node put every tensor and module on cuda:0" in said
    assert "set_device is never called" in said and "Duplicate GPU detected" in said
    assert got.problems[0].line == 12


def test_ranks_share_gpu_under_gloo_is_waste():
    got = judge(devices.RANKS_SHARE_GPU, on_gpus({0: [1], 1: [1]}, "gloo", set_device=True))
    assert got.status == Status.FOUND and got.problems[0].kind == "waste"
    assert "each process sets that same device" in got.problems[0].message


def test_ranks_share_gpu_passes_with_a_gpu_per_rank():
    got = judge(devices.RANKS_SHARE_GPU, on_gpus({0: [0], 1: [1]}))
    assert got.status == Status.PASSED and "rank 1: cuda:1" in got.why


def test_ranks_share_gpu_leaves_a_rank_on_several_gpus_alone():
    """A rank that also used another GPU is not proved to share one."""
    assert judge(devices.RANKS_SHARE_GPU, on_gpus({0: [0], 1: [0, 1]})).status == \
        Status.PASSED


def test_ranks_share_gpu_not_applicable_without_mapped_cuda():
    got = judge(devices.RANKS_SHARE_GPU, on_gpus({0: [], 1: []}))
    assert got.status == Status.NOT_APPLICABLE


def custom_epochs(digests, epochs_set):
    """A sampler of the script's own class, iterated for one training pass per digest, its
    set_epoch called with ``epochs_set`` (None: never)."""
    seen = [loader(sampler="ShardSampler", distributed=False)]
    for number, (digest, epoch) in enumerate(zip(digests, epochs_set)):
        if epoch is not None:
            seen.append(SetEpoch(sampler=0, epoch=epoch, file="train.py", line=52))
        seen += [CustomOrder(sampler=0, type="ShardSampler", epoch=epoch, first=[7, 2, 5],
                             digest=digest, loader=0, pass_number=number,
                             iter_file="train.py", iter_line=18),
                 training_pass(number)]
    return evidence({0: seen, 1: seen})


def test_a_custom_sampler_that_ignores_its_epoch_is_found_at_its_iter():
    got = judge(data.SAMPLER_SET_EPOCH, custom_epochs(["same", "same"], [0, 1]))
    assert got.status == Status.FOUND and got.problems[0].line == 18
    said = got.problems[0].message
    assert "ShardSampler" in said and "set_epoch(1) was called at train.py:52" in said
    assert "same order in epochs 0 and 1" in said and "self.epoch" in got.problems[0].fix


def test_a_custom_sampler_whose_order_follows_the_epoch_passes():
    got = judge(data.SAMPLER_SET_EPOCH, custom_epochs(["a", "b"], [0, 1]))
    assert got.status == Status.PASSED and "ShardSampler" in got.why


def test_a_custom_sampler_never_given_an_epoch_is_not_judged():
    """Its order may be meant to stay (a sampler that does not shuffle)."""
    got = judge(data.SAMPLER_SET_EPOCH, custom_epochs(["same", "same"], [None, None]))
    assert got.status == Status.NOT_APPLICABLE


def stepped(lrs: list, sums: list) -> list:
    """One rank's DDP, and each step with its learning rate and the parameter's sum after."""
    seen = [Ddp(index=0, find_unused=False, broadcast_buffers=True, static_graph=False,
                devices=["cpu"], nccl=False, requested="gloo", params=1, numel=4, bytes=16,
                buffers=0, module="Linear", file="train.py", line=10)]
    for number, (lr, total) in enumerate(zip(lrs, sums), start=1):
        seen += [Step(number=number, micro=[MicroStep(ddp=0, sync=True, batch=8)],
                      micro_count=1, backwards=[], backward_count=1, optimizer=0, lr=[lr],
                      file="train.py", line=30, step=number - 1),
                 Replica(root=None, tensors={"weight": [f"d{total}", total, 1.0, "parameter"]},
                         optimizer=0, in_ddp=1, params=1, step=number)]
    return seen


def test_replicas_diverge_names_learning_rates_that_differ():
    """A scheduler stepped on rank 0 only: from step 2 its LR is 0.7, rank 1's still 1.0."""
    ev = evidence({0: stepped([1.0, 0.7], [1.0, 2.0]), 1: stepped([1.0, 1.0], [1.0, 3.0])})
    got = judge(model.REPLICAS_DIVERGE, ev)
    assert got.status == Status.FOUND
    said = got.problems[0].message
    assert "the learning rates differ between ranks from step 2 (0.7 on rank 0 against 1 on " \
        "rank 1)" in said
    assert "scheduler.step()" in got.problems[0].fix and got.problems[0].line == 30


def test_replicas_diverge_with_one_learning_rate_keeps_its_other_causes():
    ev = evidence({0: stepped([1.0, 1.0], [1.0, 2.0]), 1: stepped([1.0, 1.0], [1.0, 3.0])})
    got = judge(model.REPLICAS_DIVERGE, ev)
    assert got.status == Status.FOUND and "learning rates" not in got.problems[0].message


def collective(op: str, line: int, seq: int) -> Collective:
    return Collective(op=op, seq=seq, group="world", devices=["cpu"], nccl=False,
                      requested="gloo", reduce=None, dtype=None, numel=None, before=None,
                      eval_samples=0, p2p=False, file="train.py", line=line)


def test_a_collective_of_the_module_run_alone_gets_its_own_fix():
    """Rank 0 runs the module inside its DDP alone at line 40, where its all_gather is; rank 1
    is in the barrier of line 41."""
    bypass = Root(index=0, kind="bypass", ddp=0, module="Sequential", file="train.py",
                  line=40)
    ev = evidence({0: [bypass, collective("all_gather", 40, 0)],
                   1: [collective("barrier", 41, 0)]})
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, ev)
    assert got.status == Status.FOUND and got.problems[0].fix.startswith("model.eval()")
    assert "runs the Sequential that DDP wraps on its own at train.py:40" in got.why


def test_a_collective_on_some_ranks_elsewhere_keeps_the_checks_fix():
    ev = evidence({0: [collective("all_reduce", 40, 0)], 1: [collective("barrier", 41, 0)]})
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, ev)
    assert got.status == Status.FOUND and got.problems[0].fix is None


def test_a_rank_silent_in_the_module_run_alone_is_found_by_its_records():
    """Rank 0 ran the module alone after its last collective and never reached rank 1's
    barrier (a rank busy in C++ may not answer the roll call: the records show it)."""
    bypass = Root(index=0, kind="bypass", ddp=0, module="Sequential", file="train.py",
                  line=40)
    ev = evidence({0: [collective("all_reduce", 30, 0), bypass],
                   1: [collective("all_reduce", 30, 0), collective("barrier", 41, 1)]})
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, ev)
    assert got.status == Status.FOUND and got.problems[0].fix.startswith("model.eval()")
    assert "rank 0 runs the Sequential that DDP wraps on its own at train.py:40" in got.why


def held(prints: dict):
    """A dataset of the script's own class, holding a split, on each rank: its fingerprint."""
    return evidence({r: [loader(dataset="SplitData", dataset_len=80, fingerprint=f),
                         training_pass(0)] for r, f in prints.items()})


def test_different_datasets_sees_a_split_inside_a_dataset_of_the_scripts_own():
    got = judge(shards.DIFFERENT_DATASETS, held({0: "holds:aa:SplitData:80",
                                                 1: "holds:bb:SplitData:80"}))
    assert got.status == Status.FOUND
    assert "rank 0: aa, rank 1: bb" in got.why and "SplitData holds" in got.why


def test_different_datasets_passes_one_split_held_alike():
    got = judge(shards.DIFFERENT_DATASETS, held({0: "holds:aa:SplitData:80",
                                                 1: "holds:aa:SplitData:80"}))
    assert got.status == Status.PASSED


def vocab(barrier_between: bool, outcomes=None):
    """Every rank writes vocab.json; rank 0 reads it, after a barrier or not."""
    write = Write(path="/run/vocab.json", how="open", mode="w", file="train.py", line=20)
    read = Read(path="/run/vocab.json", size=0, file="train.py", line=24)
    middle = [collective("barrier", 22, 0)] if barrier_between else []
    return evidence({0: [write, *middle, read], 1: [write, *middle]}, outcomes=outcomes)


def test_a_read_no_collective_orders_after_another_ranks_write_is_found():
    got = judge(files.READ_WHILE_WRITTEN, vocab(barrier_between=False))
    assert got.status == Status.FOUND and got.problems[0].line == 24
    said = got.problems[0].message
    assert "rank 0 reads /run/vocab.json at train.py:24 (0 bytes then) while rank 1 writes it" \
        in said and "each had entered 0 collectives" in said


def test_a_read_that_failed_says_so():
    crash = Crash("JSONDecodeError", "JSONDecodeError: Expecting value", "", rank=0,
                  script_line=24)
    outcomes = {0: Done(Outcome.CRASHED, crash=crash), 1: Done(Outcome.FINISHED)}
    got = judge(files.READ_WHILE_WRITTEN, vocab(barrier_between=False, outcomes=outcomes))
    assert "here it did: rank 0 failed there (JSONDecodeError" in got.why
    assert files.READ_WHILE_WRITTEN.explains.match(crash)


def test_a_read_after_a_barrier_that_follows_the_writes_passes():
    assert judge(files.READ_WHILE_WRITTEN, vocab(barrier_between=True)).status == \
        Status.PASSED


def test_a_sync_batchnorm_collective_met_by_another_gets_the_modules_fix():
    """Rank 0's ledger alone (it did not answer the roll call): its SyncBatchNorm's all-reduce
    at line 40 against rank 1's barrier."""
    sync = dataclasses.replace(collective("all_reduce", 40, 0), seq=None,
                               by=str(DdpCall.SYNC_BATCHNORM))
    ev = evidence({0: [sync], 1: [collective("barrier", 41, 0)]})
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, ev)
    assert got.status == Status.FOUND and got.problems[0].fix.startswith("model.eval()")
    assert "rank 0's forward at train.py:40 runs a SyncBatchNorm in training mode" in got.why
