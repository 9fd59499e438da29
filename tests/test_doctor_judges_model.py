"""The model judges (``judges/model.py``) on hand-built records, one test per branch:
``replicas-diverge`` (each cause it names) and ``find-unused-parameters`` (both ways)."""

from __future__ import annotations

from ddplab.doctor.judging.findings import Status
from ddplab.doctor.judging.judges import accumulation, model
from ddplab.doctor.records import LoadStateDict, Optimizer, Replica, Root, Unused
from judge_records import FILE, crashed, ddp, earlier_finding, evidence, judge, step

DDP_ROOT = Root(file=FILE, line=48, index=0, kind="ddp", ddp=0, module="Net")
SGD = Optimizer(file=FILE, line=42, index=0, type="SGD", lr=[0.1])


def state(number: int, rank_sum: float, what: str = "parameter", name: str = "net.0.weight",
          root: int | None = 0, **changes) -> Replica:
    """A replica after step ``number``: one tensor, its digest made from its sum."""
    return Replica(step=number, root=root, tensors={
        "net.0.bias": ["31d2e241a4b64dbe", -0.1478, 0.1058, "parameter"],
        name: [f"digest{rank_sum}", rank_sum, 28.93, what]}, **changes)


def replicas(sums: dict, *before, what="parameter", root=0, steps=None, **changes):
    """Per rank: ``before``, then per step its record and the replica (``sums[rank]``: the
    tensor's sum after each step)."""
    return evidence({r: [*before, *(x for n, s in enumerate(per_step, 1)
                                    for x in ((steps or {}).get(n, step(n)),
                                              state(n, s, what, root=root, **changes)))]
                     for r, per_step in sums.items()})


def test_replicas_diverge_found_in_buffers_ddp_does_not_sync():
    ev = replicas({0: [0.5, 0.61], 1: [0.5, 0.73]}, ddp(broadcast_buffers=False), DDP_ROOT,
                  what="buffer", name="bn.running_mean")
    got = judge(model.REPLICAS_DIVERGE, ev)
    assert got.status == Status.FOUND
    assert got.why.startswith("the buffer bn.running_mean of the Net differs between ranks after "
                              "step 2 (rank 0: sum 0.61, rank 1: sum 0.73; equal after step 1): "
                              "DDP at train.py:40 syncs no buffers")
    assert got.problems[0].line == 40 and "SyncBatchNorm" in got.problems[0].fix


def test_replicas_diverge_found_in_a_data_parallel_model():
    parallel = Root(file=FILE, line=35, index=0, kind="data_parallel", ddp=None,
                    module="DataParallel")
    got = judge(model.REPLICAS_DIVERGE, replicas({0: [0.5], 1: [0.7]}, parallel))
    assert got.status == Status.FOUND
    assert "differs between ranks after step 1 (rank 0: sum 0.5, rank 1: sum 0.7)" in got.why
    assert "the model run at train.py:35 is an nn.DataParallel" in got.why
    assert got.problems[0].line == 35


def test_replicas_diverge_found_without_ddp():
    plain = Root(file=FILE, line=48, index=0, kind="plain", ddp=None, module="Net")
    got = judge(model.REPLICAS_DIVERGE, replicas({0: [0.5], 1: [0.7]}, plain))
    assert got.status == Status.FOUND
    assert "of the Net differs" in got.why and "no DistributedDataParallel wraps" in got.why
    assert got.problems[0].line == 45  # the step's


def test_replicas_diverge_found_in_parameters_outside_ddp():
    """The optimizer steps 5 parameters, 3 of them in the DDP: a head made after the wrap."""
    ev = replicas({0: [0.5], 1: [0.7]}, ddp(), DDP_ROOT, SGD, root=None, optimizer=0, in_ddp=3,
                  params=5)
    got = judge(model.REPLICAS_DIVERGE, ev)
    assert got.status == Status.FOUND
    assert ("the parameter net.0.weight stepped by the SGD made at train.py:42 differs between "
            "ranks after step 1") in got.why
    assert "2 of the 5 parameters the optimizer steps are in no DDP's module" in got.why


def test_replicas_diverge_found_where_the_forward_bypasses_ddp():
    bypass = Root(file=FILE, line=50, index=1, kind="bypass", ddp=0, module="Net")
    no_forward = {1: step(1, micro=())}
    got = judge(model.REPLICAS_DIVERGE, replicas({0: [0.5], 1: [0.7]}, ddp(), DDP_ROOT, bypass,
                                                 root=1, steps=no_forward))
    assert got.status == Status.FOUND
    assert ("no forward before step 1 went through the DDP (the Net it wraps runs on its own at "
            "train.py:50): DDP all-reduces") in got.why
    assert got.problems[0].line == 50 and "ddp_model(x)" in got.problems[0].fix


def test_replicas_diverge_found_where_no_forward_was_seen_at_all():
    """No module run at top level was recorded: the step's line, the optimizer unnamed."""
    ev = replicas({0: [0.5], 1: [0.7]}, ddp(), root=None, optimizer=0, in_ddp=3, params=3,
                  steps={1: step(1, micro=())})
    got = judge(model.REPLICAS_DIVERGE, ev)
    assert got.status == Status.FOUND
    assert "net.0.weight stepped by the optimizer differs" in got.why
    assert "no forward before step 1 went through the DDP: DDP" in got.why
    assert got.problems[0].line == 45


def test_replicas_diverge_found_in_a_copy_made_before_the_wrap():
    ema = Root(file=FILE, line=55, index=1, kind="plain", ddp=None, module="Net")
    got = judge(model.REPLICAS_DIVERGE, replicas({0: [0.5], 1: [0.7]}, ddp(), DDP_ROOT, ema,
                                                 root=1))
    assert got.status == Status.FOUND
    assert "the Net first run at train.py:55 is not the module DDP wraps" in got.why
    assert "copy.deepcopy(model.module)" in got.problems[0].fix


def test_replicas_diverge_found_where_one_rank_loads_a_state_after_the_wrap():
    load = LoadStateDict(file=FILE, line=33, module="Net", after_wrap=True, wrapped=True)
    seen = {0: [ddp(), DDP_ROOT, load, step(1), state(1, 0.5)],
            1: [ddp(), DDP_ROOT, step(1), state(1, 0.7)]}
    got = judge(model.REPLICAS_DIVERGE, evidence(seen))
    assert got.status == Status.FOUND
    assert ("rank 0 loads a state dict at train.py:33 after DDP's construction and the other "
            "ranks do not") in got.why
    assert got.problems[0].line == 33


def test_replicas_diverge_names_the_optimizers_parameters_before_a_modules():
    """After one step, both the module run at top level and the parameters the optimizer
    steps differ: the optimizer's are named, whatever order they were recorded in."""
    seen = {r: [ddp(), DDP_ROOT, SGD, step(1), state(1, s),
                state(1, s, root=None, optimizer=0, in_ddp=3, params=3)]
            for r, s in ((0, 0.5), (1, 0.7))}
    got = judge(model.REPLICAS_DIVERGE, evidence(seen))
    assert got.status == Status.FOUND
    assert got.why.startswith("the parameter net.0.weight stepped by the SGD made at "
                              "train.py:42 differs")


def test_replicas_diverge_found_with_no_cause_it_can_name():
    got = judge(model.REPLICAS_DIVERGE, replicas({0: [0.5], 1: [0.7]}, ddp(), DDP_ROOT))
    assert got.status == Status.FOUND
    assert got.why.endswith("): the ranks' gradients or optimizer states differ")
    assert got.problems[0].fix is None


def test_replicas_diverge_passes_equal_replicas_even_after_a_crash_nothing_explains():
    ev = replicas({0: [0.5, 0.6], 1: [0.5, 0.6]}, ddp(), DDP_ROOT)
    ev.run.outcomes[1] = crashed("RuntimeError: out of memory")
    got = judge(model.REPLICAS_DIVERGE, ev)
    assert got.status == Status.PASSED and "equal on every rank after each of 2 steps" in got.why


def test_replicas_diverge_not_applicable_after_a_failure_a_check_explains():
    ev = replicas({0: [0.5], 1: [0.7]}, ddp(), DDP_ROOT)
    ev.run.outcomes[1] = crashed("RuntimeError: Expected to have finished reduction in the "
                                 "prior iteration")
    got = judge(model.REPLICAS_DIVERGE, ev, [earlier_finding(model.FIND_UNUSED_PARAMETERS,
                                                             explains=True)])
    assert got.status == Status.NOT_APPLICABLE
    assert got.why.startswith("the run failed as find-unused-parameters says")


def test_replicas_diverge_not_applicable_after_an_unsynced_step():
    got = judge(model.REPLICAS_DIVERGE, replicas({0: [0.5], 1: [0.7]}, ddp()),
                [earlier_finding(accumulation.ACCUMULATION_UNSYNCED_STEP)])
    assert got.status == Status.NOT_APPLICABLE
    assert got.why.startswith("explained by accumulation-unsynced-step")


def test_replicas_diverge_not_applicable_without_a_step_or_a_second_rank():
    got = judge(model.REPLICAS_DIVERGE, evidence({0: [ddp()], 1: [ddp()]}))
    assert got.status == Status.NOT_APPLICABLE and got.why == "no optimizer step was taken"
    got = judge(model.REPLICAS_DIVERGE, replicas({0: [0.5]}))
    assert got.status == Status.NOT_APPLICABLE and got.why == "one rank"


def unused(names_by_rank: dict, backwards: int = 2, **options):
    """Per rank: a DDP (``options``) and ``backwards`` checks of what it left unused."""
    return evidence({r: [ddp(**options), *(Unused(step=n, ddp=0, names=names)
                                           for n in range(backwards))]
                     for r, names in names_by_rank.items()})


def test_find_unused_parameters_found_where_a_parameter_got_no_gradient():
    got = judge(model.FIND_UNUSED_PARAMETERS, unused({0: [], 1: ["head.weight", "head.bias"]}))
    assert got.status == Status.FOUND and got.problems[0].kind is None  # the check's: error
    assert got.why.startswith("head.bias, head.weight got no gradient in a backward on rank 1, "
                              "and DDP at train.py:40 has find_unused_parameters=False")


def test_find_unused_parameters_found_names_four_and_the_ranks():
    names = ["aux.0.weight", "aux.0.bias", "aux.1.weight", "aux.1.bias", "aux.2.weight"]
    got = judge(model.FIND_UNUSED_PARAMETERS, unused({0: names, 1: names}))
    assert got.why.startswith("aux.0.bias, aux.0.weight, aux.1.bias, aux.1.weight ... got no "
                              "gradient in a backward on ranks 0, 1")


def test_find_unused_parameters_found_as_waste_where_every_parameter_got_one():
    got = judge(model.FIND_UNUSED_PARAMETERS, unused({0: [], 1: []}, find_unused=True))
    assert got.status == Status.FOUND and got.problems[0].kind == "waste"
    assert ("find_unused_parameters=True, but every parameter got a gradient in each of the 4 "
            "backwards checked (on 2 ranks)") in got.why


def test_find_unused_parameters_passes_true_where_a_parameter_is_unused():
    got = judge(model.FIND_UNUSED_PARAMETERS, unused({0: ["head.bias"], 1: []}, find_unused=True))
    assert got.status == Status.PASSED
    assert got.why == ("find_unused_parameters matches the model: head.bias got no gradient in "
                       "some of the 4 backwards checked (on 2 ranks), and DDP at train.py:40 has "
                       "find_unused_parameters=True")


def test_find_unused_parameters_passes_false_where_every_parameter_got_one():
    got = judge(model.FIND_UNUSED_PARAMETERS, unused({0: [], 1: []}))
    assert got.status == Status.PASSED
    assert got.why == ("find_unused_parameters matches the model: every parameter of DDP at "
                       "train.py:40 got a gradient in each of the 4 backwards checked (on 2 "
                       "ranks), and it has find_unused_parameters=False")


def test_find_unused_parameters_passes_a_static_graph_with_what_it_left_unused():
    """A static graph finds the unused parameters itself, whatever find_unused_parameters
    says; a DDP no backward went through is named as not checked."""
    got = judge(model.FIND_UNUSED_PARAMETERS, unused({0: ["head.bias"], 1: []},
                                                     static_graph=True))
    assert got.status == Status.PASSED and got.problems == []
    assert got.why == ("find_unused_parameters matches the model: DDP at train.py:40 has "
                       "static_graph=True, which finds the parameters that get no gradient "
                       "itself (head.bias got none)")
    got = judge(model.FIND_UNUSED_PARAMETERS, unused({0: [], 1: []}, backwards=0,
                                                     static_graph=True))
    assert got.why.endswith("get no gradient itself")
    seen = {r: [ddp(static_graph=True), ddp(index=1, line=41)] for r in (0, 1)}
    got = judge(model.FIND_UNUSED_PARAMETERS, evidence(seen))
    assert got.status == Status.PASSED
    assert got.why.endswith("get no gradient itself; no backward through DDP at train.py:41 was "
                            "checked")


def test_find_unused_parameters_not_applicable_where_no_backward_was_checked():
    got = judge(model.FIND_UNUSED_PARAMETERS, unused({0: [], 1: []}, backwards=0,
                                                     find_unused=True))
    assert (got.status, got.why) == (Status.NOT_APPLICABLE,
                                     "no backward through DDP at train.py:40 was checked")


def test_find_unused_parameters_not_applicable_without_ddp():
    got = judge(model.FIND_UNUSED_PARAMETERS, evidence({0: [], 1: []}))
    assert got.status == Status.NOT_APPLICABLE and "no DistributedDataParallel" in got.why
