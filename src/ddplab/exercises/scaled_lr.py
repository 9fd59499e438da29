"""Exercise ``scaled-lr``: the learning rate of every step when the global batch grows.

The reader writes ``scaled_lr(step, lr, world_size, rule, warmup_steps) -> float``: the rate at
optimizer step ``step`` (0 is the first) when ``lr`` is the rate for one process and every rank
keeps the one-process batch, so the global batch is ``world_size`` times larger. The rule
multiplies ``lr`` by 1 (none), ``world_size`` (linear, Goyal et al. 2017, section 2.1) or its
square root (sqrt); gradual warmup (section 2.2) climbs by the same amount every step, from
``lr`` at step 0 to the scaled rate at step ``warmup_steps``, which it keeps; with
``warmup_steps=0`` the scaled rate holds from step 0. That is the schedule the learning-rate
chapter's runs use (``lr_schedule`` in ``chapters/lr_scaling/lr_scaling.py``); this package
imports no chapter, so :func:`schedule` writes it again, and the tests compare the two.

The cheaper check comes first. :func:`judge_in_caller` calls the reader's function here, in the
caller, on every step of each configuration in ``CONFIGS`` (in order, then in reverse order) and
compares it with :func:`schedule`: the first rate that differs is the message, with the mistake
named where the configuration's rates show one. Only a schedule that passes goes on to ranks:
each rank trains the small MLP with real DDP on its rows of each global batch, with SGD whose
rate ``torch.optim.lr_scheduler.LambdaLR`` takes from the reader's function, a few steps past
the warmup. The caller compares the rate every rank stepped with, and its parameters, with one
process trained on the whole global batches (mean loss) by :func:`schedule`. The reader's code
runs inside the training loop (LambdaLR calls it after each step), between DDP's own
all-reduces; after the loop each rank returns what it has and calls no collective.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim.lr_scheduler import LambdaLR

from ddplab.common.mlp import make_batch, make_model
from ddplab.exercises import checker
from ddplab.exercises.record import Exercise

CONFIGS = [  # (lr, world_size, rule, warmup_steps): the first that differs is the message
    (0.1, 4, "linear", 10),
    (0.1, 4, "sqrt", 10),  # 4 / 2 is sqrt(4): 8 ranks tell them apart
    (0.15, 8, "sqrt", 10),
    (0.15, 8, "linear", 10),  # the chapter's claim: 8 ranks, lr 0.15, 10 warmup steps
    (0.15, 8, "none", 10),  # a flat ramp, from lr to lr
    (0.2, 2, "linear", 3),
    (0.05, 3, "sqrt", 1),  # a ramp of one step: lr, then the scaled rate
    (0.1, 4, "linear", 0),  # no warmup: the scaled rate from step 0
    (0.1, 2, "sqrt", 0),
    (0.3, 1, "linear", 5),  # one process: every rule keeps lr
    (0.3, 1, "sqrt", 0),
]
PAST_WARMUP = 3  # steps checked from warmup_steps on
KEYS = ("step", "lr", "world_size", "rule", "warmup_steps")  # a schedule case
SCHEDULE_CASES = [(step, *config) for config in CONFIGS
                  for step in range(config[3] + PAST_WARMUP)]
LAYERS = (8, 16, 4)
BATCH_SIZE = 4  # samples per rank and step
TRAININGS = [{"lr": 0.1, "rule": "linear", "warmup_steps": 3, "steps": 6, "seed": 0},
             {"lr": 0.05, "rule": "sqrt", "warmup_steps": 4, "steps": 7, "seed": 1}]
ATOL = 1e-6  # parameters: DDP against one process


def scaled_lr(step: int, lr: float, world_size: int, rule: str, warmup_steps: int) -> float:
    """The answer: the rule's factor, then a straight line from ``lr`` at step 0 to the scaled
    rate at step ``warmup_steps``, and the scaled rate from then on."""
    factor = {"none": 1.0, "linear": world_size, "sqrt": math.sqrt(world_size)}[rule]
    peak = lr * factor
    if step >= warmup_steps:
        return peak
    return lr + (peak - lr) * step / warmup_steps


def factor_of(rule: str, world_size: int) -> float:
    return {"none": 1.0, "linear": float(world_size), "sqrt": world_size ** 0.5}[rule]


def schedule(lr: float, world_size: int, rule: str, warmup_steps: int, steps: int) -> list:
    """The reference: the ramp as the lab's claim draws it, ``np.linspace(lr, peak,
    warmup_steps + 1)``, its last point (the peak) held to the end."""
    peak = lr * factor_of(rule, world_size)
    ramp = np.linspace(lr, peak, warmup_steps + 1)[:-1].tolist()
    return (ramp + [peak] * steps)[:steps]


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def at(step, lr, world_size, rule, warmup_steps) -> str:
    return (f"at step {step}, lr {lr:g}, {world_size} rank{'s' * (world_size > 1)}, rule {rule}, "
            f"{warmup_steps} warmup steps")


def judge_in_caller(solution) -> tuple[dict, str] | None:
    """The first schedule case where ``solution`` differs, raises or returns no number, with
    the message; None when every case agrees. Runs here: no rank is started."""
    for config in CONFIGS:
        steps = config[3] + PAST_WARMUP
        want = schedule(*config, steps)
        got = {}
        for step in [*range(steps), *reversed(range(steps))]:  # twice: once in reverse
            case = dict(zip(KEYS, (step, *config)))
            try:
                value = solution(step, *config)
            except Exception as exc:
                return case, f"{at(**case)}: scaled_lr raised {type(exc).__name__}: {exc}" + (
                    ". warmup_steps=0 means no warmup: the scaled rate from step 0; divide by "
                    "warmup_steps only while step < warmup_steps."
                    if config[3] == 0 and isinstance(exc, ZeroDivisionError) else "")
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                return case, (f"{at(**case)}: scaled_lr returned {type(value).__name__} "
                              f"{value!r}, not a float: return the rate as a number.")
            if step in got and not close(float(value), got[step]):
                return case, (f"{at(**case)}: yours gave {got[step]:.6g} the first time and "
                              f"{float(value):.6g} when asked again: the rate must follow from "
                              "the arguments alone, not from how often or in what order it "
                              "was asked (a run resumed from a checkpoint asks from a later "
                              "step on).")
            got[step] = float(value)
        rates = [got[step] for step in range(steps)]
        wrong = [step for step in range(steps) if not close(rates[step], want[step])]
        if wrong:
            case = dict(zip(KEYS, (wrong[0], *config)))
            return case, (f"{at(**case)}: yours {rates[wrong[0]]:.6g}, expected "
                          f"{want[wrong[0]]:.6g}. {diagnosis(*config, rates, want)}")
    return None


def diagnosis(lr, world_size, rule, warmup_steps, rates, want) -> str:
    """The mistake the configuration's rates show, in words."""
    peak, end, factor = want[-1], rates[-1], factor_of(rule, world_size)
    if all(close(got, w / lr) for got, w in zip(rates, want)):
        return ("Yours is the rate divided by lr, LambdaLR's multiplier: return the rate "
                "itself.")
    if not close(end, peak):
        head = f"After the warmup yours is lr x {end / lr:.4g}; rule {rule} multiplies lr by "
        if close(end, lr):
            return (head + f"{factor:.4g}. Yours is the none rule's rate: every rank keeps "
                    f"the one-process batch, so the global batch is {world_size} times larger; "
                    "the rule scales by the world size, not by the per-rank batch, which did "
                    "not grow.")
        if rule == "linear" and close(end, lr * world_size ** 0.5):
            return (head + f"the world size, {world_size}: linear and sqrt swapped (yours is "
                    "the sqrt rule's).")
        if rule == "sqrt" and close(end, lr * world_size):
            return (head + f"sqrt({world_size}) = {factor:.4g}: linear and sqrt swapped "
                    "(yours is the linear rule's).")
        if rule == "sqrt" and close(end, lr * world_size / 2):
            return (head + f"sqrt({world_size}) = {factor:.4g}: yours is world_size / 2; the "
                    "square root is math.sqrt(world_size), or world_size ** 0.5.")
        return head + f"{factor:.4g}."
    if warmup_steps == 0:
        return "warmup_steps=0 means no warmup: the scaled rate from step 0."
    if all(close(got, peak) for got in rates):
        return (f"No warmup: with warmup_steps={warmup_steps} the rate starts at lr and climbs "
                f"to the scaled rate at step {warmup_steps}.")
    if close(rates[0], 0.0):
        return ("Yours ramps from 0; Goyal et al. ramp from the one-process rate: lr at step "
                f"0, lr x {factor:.4g} at step {warmup_steps}.")
    reached = next(s for s in range(len(rates)) if all(close(g, peak) for g in rates[s:]))
    if abs(reached - warmup_steps) == 1:
        when = "late" if reached > warmup_steps else "early"
        return (f"Yours reaches the scaled rate one step {when}, at step {reached}: lr at "
                "step 0, the scaled rate at step "
                f"warmup_steps ({warmup_steps}), lr + (peak - lr) * step / warmup_steps "
                "between.")
    return ("Gradual warmup adds the same amount every step: lr + (peak - lr) * step / "
            "warmup_steps before step warmup_steps, the peak from then on.")


def cases(world_size: int) -> list[tuple[int, dict]]:
    """The DDP trainings: one on the size asked for, one on 4 ranks (2 when 4 is asked for)."""
    return [(world_size, TRAININGS[0]), (4 if world_size != 4 else 2, TRAININGS[1])]


def on_rank(ctx, solution, call_id: str, lr: float, rule: str, warmup_steps: int, steps: int,
            seed: int) -> dict:
    """``steps`` DDP steps on this rank's rows of each global batch, SGD's rate set by LambdaLR
    from ``solution``; the rate of every step and the parameters after the last."""
    model = make_model(LAYERS, seed).to(ctx.device)
    ddp = DDP(model)  # on the pool's group, formed before the reader's code
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    rows = slice(ctx.rank * BATCH_SIZE, (ctx.rank + 1) * BATCH_SIZE)
    rates = []
    checker.enter(call_id, ctx.rank)
    scheduler = LambdaLR(optimizer, lambda step: solution(step, lr, ctx.world_size, rule,
                                                          warmup_steps) / lr)
    for step in range(steps):
        X, y = make_batch(LAYERS, BATCH_SIZE, ctx.world_size, seed, step)
        optimizer.zero_grad()
        F.mse_loss(ddp(X[rows].to(ctx.device)), y[rows].to(ctx.device)).backward()
        rates.append(float(optimizer.param_groups[0]["lr"]))
        optimizer.step()
        scheduler.step()
    checker.leave(call_id, ctx.rank)
    return {"rates": rates, "got": {n: p.detach() for n, p in model.named_parameters()}}


def one_process(world_size: int, lr: float, rule: str, warmup_steps: int, steps: int,
                seed: int) -> dict:
    """The parameters after ``steps`` SGD steps on the whole global batches (mean loss) in one
    process, each at the rate :func:`schedule` gives."""
    model = make_model(LAYERS, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step, rate in enumerate(schedule(lr, world_size, rule, warmup_steps, steps)):
        X, y = make_batch(LAYERS, BATCH_SIZE, world_size, seed, step)
        optimizer.zero_grad()
        F.mse_loss(model(X), y).backward()
        optimizer.param_groups[0]["lr"] = rate
        optimizer.step()
    return {n: p.detach().numpy() for n, p in model.named_parameters()}


def judge(world_size: int, params: dict, results: list) -> str | None:
    lr, rule, warmup_steps = params["lr"], params["rule"], params["warmup_steps"]
    where = (f"DDP on {world_size} ranks, lr {lr:g}, rule {rule}, {warmup_steps} warmup "
             f"steps, {params['steps']} steps through LambdaLR")
    want = schedule(lr, world_size, rule, warmup_steps, params["steps"])
    for rank, result in enumerate(results):
        for step, (got, rate) in enumerate(zip(result["rates"], want)):
            if close(got, rate):
                continue
            head = (f"{where}: rank {rank} stepped with lr {got:.6g} at step {step}, the "
                    f"schedule says {rate:.6g}")
            first = results[0]["rates"][step]
            if rank and close(first, rate):
                return (f"{head}, rank 0 with {first:.6g}: the ranks stepped with different "
                        "rates, so their replicas drift apart (DDP averages gradients, never "
                        "parameters). The rate must follow from the arguments alone, the same "
                        "on every rank.")
            return (f"{head}: your function gave LambdaLR another rate than it gave the checker "
                    "for the same arguments; does it read something besides its arguments?")
    return compare_params(where, params["steps"], [r["got"] for r in results],
                          one_process(world_size, **params))


def compare_params(where: str, steps: int, got: list, want: dict) -> str | None:
    """None when every rank's parameters are within ``ATOL`` of one process's."""
    for rank, parameters in enumerate(got):
        for name, expected in want.items():
            error = float(np.max(np.abs(np.asarray(parameters[name]) - expected)))
            if error > ATOL:
                return (f"{where}: after {steps} steps the parameter {name!r} on rank {rank} "
                        f"differs from one process's on the whole global batches by up to "
                        f"{error:.3g} (more than {ATOL:g}).")
    return None


EXERCISE = Exercise(
    name="scaled-lr", lab="labs/03_lr_scaling.ipynb", function="scaled_lr",
    signature="scaled_lr(step, lr, world_size, rule, warmup_steps) -> float",
    against=(f"one process on the whole global batches (DDP stepped through LambdaLR by your "
             f"schedule, whose {len(SCHEDULE_CASES)} learning rates on world sizes 1 to 8 agree "
             "with Goyal et al.'s gradual warmup)"),
    answer=scaled_lr, cases=cases, on_rank=on_rank, judge=judge, judge_in_caller=judge_in_caller)
