"""The collective judges (``judges/collectives.py``) on hand-built records, one test per
branch: ``collective-on-some-ranks``, ``gradients-reduced-twice``, ``barrier-every-step``,
``cpu-tensor-nccl``, ``hang``."""

from __future__ import annotations

from ddplab.doctor.judging.findings import Status
from ddplab.doctor.judging.judges import collectives, data, devices, hang
from ddplab.doctor.messages import Alarm, Done, Hang, Waiting, Where
from ddplab.doctor.records import DdpCall, GroupInit, Outcome
from judge_records import FILE, collective, ddp, earlier_finding, evidence, judge, step

GRADIENTS = collective(line=44, by=DdpCall.GRADIENTS, seq=None, reduce=None, numel=834)
BARRIER = collective("barrier", reduce=None, dtype=None, numel=None)


def test_collective_on_some_ranks_found_on_rank_0_only():
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, evidence({0: [BARRIER], 1: []}))
    assert got.status == Status.FOUND
    assert got.why == ("barrier at train.py:50 runs on rank 0 only (collective #1 of the default "
                       "group; collectives called: rank 0: 1, rank 1: 0): the other ranks never "
                       "join it, so rank 0 either waits forever or pairs it with a different "
                       "collective")
    assert got.problems[0].line == 50 and got.problems[0].fix is None


def test_collective_on_some_ranks_found_in_a_group_two_of_three_ranks_call():
    ev = evidence({0: [collective(group="0,1,2")], 1: [collective(group="0,1,2")], 2: []})
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, ev)
    assert got.status == Status.FOUND
    assert ("runs on ranks 0, 1 only (collective #1 of group 0,1,2; collectives called: rank 0: "
            "1, rank 1: 1, rank 2: 0): the other ranks never join it, so ranks 0, 1 either wait "
            "forever or pair it") in got.why


def test_collective_on_some_ranks_found_where_the_ranks_call_different_reductions():
    """Rank 0's evaluation all-reduce meets rank 1's gradient all-reduce: one op, two sizes."""
    ev = evidence({0: [GRADIENTS, collective(line=52, numel=2)], 1: [GRADIENTS, GRADIENTS]})
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, ev)
    assert got.status == Status.FOUND
    assert got.why == ("collective #2 of the group is all_reduce at train.py:52 on rank 0; DDP's "
                       "all-reduce of the gradients (all_reduce) at train.py:44 on rank 1: the "
                       "ranks call different collectives at the same point (float32 x 2 on rank "
                       "0; float32 x 834 on rank 1)")
    assert got.problems[0].evidence["counts"] == {0: 2, 1: 2}


def test_collective_on_some_ranks_found_where_one_reduction_differs_in_size():
    """Each rank all-reduces its own number of predictions: one op, two sizes."""
    ev = evidence({0: [collective(line=52, numel=23)], 1: [collective(line=52, numel=22)]})
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, ev)
    assert got.status == Status.FOUND
    assert got.why.endswith("at the same point (float32 x 23 on rank 0; float32 x 22 on rank 1)")


def test_collective_on_some_ranks_found_where_the_ranks_call_different_ops():
    ev = evidence({0: [BARRIER], 1: [collective(line=58)]})
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, ev)
    assert got.status == Status.FOUND
    assert got.why.endswith("barrier at train.py:50 on rank 0; all_reduce at train.py:58 on "
                            "rank 1: the ranks call different collectives at the same point")


def test_collective_on_some_ranks_names_ddps_forward_on_one_rank():
    """Rank 0 evaluates through the DDP alone: its forward broadcasts rank 0's buffers."""
    buffers = collective("broadcast", line=81, by=DdpCall.BUFFERS, seq=None, reduce=None)
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, evidence({0: [buffers], 1: []}))
    assert got.status == Status.FOUND
    assert got.why.startswith("DDP's broadcast of rank 0's buffers before a forward (broadcast) "
                              "at train.py:81 runs on rank 0 only")
    assert got.why.endswith("the DDP's forward broadcasts rank 0's buffers first, a collective "
                            "the other ranks only join in their own forward")
    assert "model.module(inputs)" in got.problems[0].fix


def test_collective_on_some_ranks_leaves_a_crashed_rank_to_its_crash():
    ev = evidence({0: [GRADIENTS, GRADIENTS, GRADIENTS], 1: [GRADIENTS, GRADIENTS]},
                  outcomes={0: Done(Outcome.FINISHED), 1: Done(Outcome.CRASHED, steps=2)})
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, ev)
    assert got.status == Status.PASSED
    assert got.why == ("the ranks called the same collectives (DDP's own included) in the same "
                       "order as far as each went: the default group: the first 2 collectives "
                       "alike, then rank 1 crashed and called no more (collectives called: rank "
                       "0: 3, rank 1: 2)")


def test_collective_on_some_ranks_says_a_rank_crashed_before_its_first_collective():
    """Rank 2 of 3 crashed at once: nothing of the 4 collectives the others called is
    divided among the ranks."""
    ev = evidence({0: [GRADIENTS] * 4, 1: [GRADIENTS] * 4, 2: []},
                  outcomes={0: Done(Outcome.FINISHED), 1: Done(Outcome.FINISHED),
                            2: Done(Outcome.CRASHED)})
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, ev)
    assert got.status == Status.PASSED
    assert got.why.endswith("as far as each went: the default group: rank 2 crashed and called "
                            "no more (collectives called: rank 0: 4, rank 1: 4, rank 2: 0)")


def test_collective_on_some_ranks_leaves_an_extra_backward_to_uneven_inputs():
    ev = evidence({0: [GRADIENTS, GRADIENTS], 1: [GRADIENTS]})
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, ev, [earlier_finding(data.UNEVEN_INPUTS)])
    assert got.status == Status.PASSED
    assert got.why.endswith("as far as each went: the default group: the first 1 collective "
                            "alike, then the gradient all-reduce of a backward some ranks did not "
                            "run, which uneven-inputs names (collectives called: rank 0: 2, rank "
                            "1: 1)")


def test_collective_on_some_ranks_passes_groups_of_some_ranks_with_each_ranks_count():
    """Ranks 0 and 1 also share a group that rank 2 is not in: the ranks' counts differ."""
    pair = collective(group="0,1", line=52)
    ev = evidence({0: [GRADIENTS, pair], 1: [GRADIENTS, pair], 2: [GRADIENTS]})
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, ev)
    assert got.status == Status.PASSED
    assert got.why == ("each group's ranks called the same collectives in the same order (DDP's "
                       "own included; collectives called: rank 0: 2, rank 1: 2, rank 2: 1)")


def test_collective_on_some_ranks_passes_the_same_sequence():
    seen = [GRADIENTS, GRADIENTS, collective(line=52, numel=2)]
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, evidence({0: seen, 1: seen}))
    assert got.status == Status.PASSED
    assert got.why == ("every rank called the same 3 collectives (DDP's own included) in the "
                       "same order")


def test_collective_on_some_ranks_not_applicable_to_point_to_point_only():
    send = collective("send", p2p=True, seq=None, reduce=None)
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, evidence({0: [send], 1: []}))
    assert got.status == Status.NOT_APPLICABLE and "no collective was called" in got.why


def test_collective_on_some_ranks_not_applicable_on_one_rank():
    got = judge(collectives.COLLECTIVE_ON_SOME_RANKS, evidence({0: [BARRIER]}))
    assert got.status == Status.NOT_APPLICABLE and got.why == "one rank"


def reduced_by_hand(reduce: str, micro=(True,)):
    """DDP's backward, then the script's all-reduce of each gradient, then the step."""
    grads = [collective(step=0, line=47, reduce=reduce, grad_of=name, numel=n)
             for name, n in (("embeddings.weight", 800), ("classifier.weight", 32),
                             ("classifier.bias", 2))]
    seen = [ddp(), GRADIENTS, *grads, step(1, micro=micro)]
    return evidence({0: seen, 1: seen})


def test_gradients_reduced_twice_found_after_ddps_own_all_reduce():
    got = judge(collectives.GRADIENTS_REDUCED_TWICE, reduced_by_hand("SUM"))
    assert got.status == Status.FOUND
    assert got.why == ("before optimizer step 1, DDP all-reduced the gradients in the backward, "
                       "and the script all-reduces 3 of the 3 gradients again (3 all_reduce(SUM) "
                       "calls from train.py:47, 834 numbers): they were already averaged, so "
                       "this only moves them a second time (and a SUM there makes them "
                       "world_size times the mean unless the script divides)")


def test_gradients_reduced_twice_found_with_avg_says_no_more():
    got = judge(collectives.GRADIENTS_REDUCED_TWICE, reduced_by_hand("AVG"))
    assert got.status == Status.FOUND and "3 all_reduce(AVG) calls" in got.why
    assert got.why.endswith("this only moves them a second time")


def test_gradients_reduced_twice_passes_a_reduction_under_no_sync():
    got = judge(collectives.GRADIENTS_REDUCED_TWICE, reduced_by_hand("SUM", micro=(False,)))
    assert got.status == Status.PASSED and "only where DDP did not (under no_sync)" in got.why


def test_gradients_reduced_twice_passes_without_a_gradient_reduced_by_hand():
    seen = [ddp(), GRADIENTS, step(1)]
    got = judge(collectives.GRADIENTS_REDUCED_TWICE, evidence({0: seen, 1: seen}))
    assert got.status == Status.PASSED and "never all-reduces a gradient" in got.why


def test_gradients_reduced_twice_not_applicable_without_ddp():
    got = judge(collectives.GRADIENTS_REDUCED_TWICE, evidence({0: [step(1)], 1: [step(1)]}))
    assert got.status == Status.NOT_APPLICABLE and "no DistributedDataParallel" in got.why


def logging_loop(steps: int, barrier_at=None, logged: bool = True):
    """Per step: DDP's all-reduce, the script's barrier (at the steps ``barrier_at``) and its
    all-reduce of one logged number, then the step."""
    seen = []
    for n in range(1, steps + 1):
        seen += [collective(step=n - 1, line=44, by=DdpCall.GRADIENTS, numel=834)]
        if barrier_at is None or n in barrier_at:
            seen += [collective("barrier", step=n - 1, reduce=None, numel=None)]
        if logged:
            seen += [collective(step=n - 1, line=53, before=[0.71])]
        seen += [step(n)]
    return evidence({0: seen, 1: seen})


def test_barrier_every_step_found_beside_the_logging_reductions():
    got = judge(collectives.BARRIER_EVERY_STEP, logging_loop(3))
    assert got.status == Status.FOUND
    assert got.why.startswith("barrier at train.py:50 runs before each of the 3 optimizer steps, "
                              "beside 1 all-reduces of a few numbers each step (logging): each "
                              "adds a collective per step, and on NCCL the host waits")
    assert got.problems[0].evidence == {"steps": 3, "barriers_per_step": 1,
                                        "small_collectives_per_step": 1}


def test_barrier_every_step_found_alone():
    got = judge(collectives.BARRIER_EVERY_STEP, logging_loop(2, logged=False))
    assert got.status == Status.FOUND
    assert got.why.startswith("barrier at train.py:50 runs before each of the 2 optimizer steps: "
                              "each adds a collective per step")


def test_barrier_every_step_passes_a_barrier_at_some_steps():
    got = judge(collectives.BARRIER_EVERY_STEP, logging_loop(3, barrier_at={3}))
    assert got.status == Status.PASSED
    assert got.why == "no barrier before every one of the 3 optimizer steps"


def test_barrier_every_step_not_applicable_to_one_step():
    got = judge(collectives.BARRIER_EVERY_STEP, logging_loop(1))
    assert got.status == Status.NOT_APPLICABLE and "fewer than two" in got.why


NCCL = GroupInit(file=FILE, line=12, requested="nccl", used="gloo", backend="gloo",
                 world_size=2)


def test_cpu_tensor_nccl_found_in_ddp_and_a_collective_each_named_once():
    counts = collective(line=63, nccl=True, requested="nccl", dtype="int64", numel=2)
    seen = [NCCL, ddp(nccl=True, requested="nccl"), counts, counts]
    got = judge(devices.CPU_TENSOR_NCCL, evidence({0: seen, 1: seen}))
    assert got.status == Status.FOUND and len(got.problems) == 2
    model, call = (p.message for p in got.problems)
    assert model.startswith("DDP at train.py:40 wraps a model whose parameters are on the CPU, "
                            "in a group that asked for NCCL")
    assert call == ("all_reduce at train.py:63 gets a CPU tensor in a group that asked for NCCL: "
                    "there it raises \"No backend type associated with device type cpu\" (this "
                    "run used gloo: no GPU here)")


def test_cpu_tensor_nccl_found_on_a_machine_that_ran_nccl():
    ran = GroupInit(file=FILE, line=12, requested="nccl", used="nccl", backend="nccl",
                    world_size=2)
    seen = [ran, ddp(nccl=True, requested="nccl", devices=["cpu"])]
    got = judge(devices.CPU_TENSOR_NCCL, evidence({0: seen, 1: seen}))
    assert got.status == Status.FOUND and got.why.endswith("before their broadcast)")


def test_cpu_tensor_nccl_passes_tensors_on_the_gpu():
    seen = [NCCL, ddp(nccl=True, devices=["cuda:0"]),
            collective(nccl=True, requested="nccl", devices=["cuda:0"])]
    got = judge(devices.CPU_TENSOR_NCCL, evidence({0: seen, 1: seen}))
    assert got.status == Status.PASSED
    assert got.why == "1 collectives under NCCL, every tensor on the GPU"


def test_cpu_tensor_nccl_not_applicable_under_gloo():
    gloo = GroupInit(file=FILE, line=12, requested="gloo", used="gloo", backend="gloo",
                     world_size=2)
    got = judge(devices.CPU_TENSOR_NCCL, evidence({0: [gloo, collective()], 1: [gloo]}))
    assert got.status == Status.NOT_APPLICABLE and got.why == "the script asked for gloo, not " \
                                                              "NCCL"
    got = judge(devices.CPU_TENSOR_NCCL, evidence({0: [], 1: []}))
    assert got.why == "the script asked for no backend, not NCCL"


def hung(outcomes: dict, positions: dict, waiting=None, waited=3.1):
    waiting = waiting or Waiting("barrier", since=1754000000.0, file=FILE, line=50, seq=0)
    return evidence({r: [] for r in range(len(outcomes) + len(positions))}, outcomes=outcomes,
                    hang=Hang(Alarm(rank=0, waiting=waiting, waited=waited), positions))


def test_hang_found_with_where_every_rank_is():
    ev = hung({0: Done(Outcome.STOPPED, steps=8), 1: Done(Outcome.FINISHED, steps=8)},
              {0: Where(rank=0)})  # the waiting rank is not said twice
    got = judge(hang.HANG, ev)
    assert got.status == Status.FOUND
    assert got.why == ("rank 0 waits in barrier #1 at train.py:50 (for 3 s); rank 1 has finished "
                       "the script (after 8 optimizer steps)")
    assert got.problems[0].line == 50 and got.problems[0].evidence["alarm"]["rank"] == 0


def test_hang_found_names_each_way_a_rank_can_be():
    waiting = Waiting("backward", since=1754000000.0)
    ev = hung({1: Done(Outcome.CRASHED, steps=3), 2: Done(Outcome.STOPPED, steps=8)},
              {3: Where(rank=3, silent=True),
               4: Where(rank=4, waiting=Waiting("all_reduce", since=1754000001.0, file=FILE,
                                                line=52)),
               5: Where(rank=5, waiting=Waiting("recv", since=1754000001.0)),
               6: Where(rank=6, file=FILE, line=70, inner="wait")}, waiting=waiting, waited=0)
    got = judge(hang.HANG, ev)
    assert got.status == Status.FOUND
    assert got.why == ("rank 0 waits in backward; rank 1 has crashed (after 3 optimizer steps); "
                       "rank 2 was stopped by the doctor (after 8 optimizer steps); rank 3 did "
                       "not answer (busy outside Python); rank 4 waits in all_reduce at "
                       "train.py:52; rank 5 waits in recv; rank 6 is at train.py:70 (in wait)")


def test_hang_passes_a_hang_an_earlier_check_explains():
    ev = hung({1: Done(Outcome.FINISHED, steps=8)}, {})
    got = judge(hang.HANG, ev, [earlier_finding(collectives.COLLECTIVE_ON_SOME_RANKS,
                                                       explains=True)])
    assert got.status == Status.PASSED
    assert got.why == "the hang is collective-on-some-ranks's"


def test_hang_passes_a_run_without_an_alarm():
    """A roll call after a crash is no hang: no rank's watchdog raised the alarm."""
    ev = evidence({0: [], 1: []}, hang=Hang(None, {1: Where(rank=1, file=FILE, line=50)}))
    got = judge(hang.HANG, ev)
    assert got.status == Status.PASSED and "no rank waited longer" in got.why
