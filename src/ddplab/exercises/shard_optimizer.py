"""Exercise ``shard-optimizer``: ZeRO stage 1 by hand (Stanford CS336 assignment 2's
``ShardedOptimizer``; in PyTorch, ``torch.distributed.optim.ZeroRedundancyOptimizer``).

The reader writes ``class ShardedOptimizer(torch.optim.Optimizer)`` with ``__init__(params,
optimizer_cls, **kwargs)``, ``step(closure=None)`` and ``zero_grad()``: each rank builds
``optimizer_cls`` on its own share of the parameters only, steps that share, and then every
parameter is broadcast from the rank that stepped it. Every rank trains a small MLP under DDP for
a few steps, on its own rows of each global batch, with the reader's optimizer wrapping SGD with
momentum or Adam. It passes when:

* every rank's parameters equal (within 1e-6) one process's with the plain optimizer on the
  whole global batches (mean loss), which the caller computes once;
* each parameter's optimizer state is held exactly once: the ranks' bytes add up to the plain
  optimizer's, and no parameter's state is on two ranks;
* no rank holds more than a share: at most the state of the ceil(n / world_size) largest of the
  n parameters. Any sharding by count (parameter i to rank i % world_size, or contiguous runs)
  or by size (ZeRO's largest first, to the rank with the fewest elements) stays within it;
  one rank holding everything does not.

How the state is counted, on each rank after the last step: the checker walks the reader's
object (itself, its attributes, and the lists, tuples and dicts in them, a few levels down) for
``torch.optim.Optimizer`` instances and adds up the tensors in their ``state``, each storage once
(two optimizers that share tensors count them once), by the parameter each belongs to. State
kept anywhere else is not seen: keep it in ``optimizer_cls`` instances, as the exercise asks.
"""

from __future__ import annotations

import math
import types

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddplab.common.ledger import Ledger
from ddplab.common.mlp import make_batch, make_model
from ddplab.engine import hang_watch
from ddplab.exercises import checker
from ddplab.exercises.record import Exercise

OPTIMIZERS = {"momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
              "adam": (torch.optim.Adam, {"lr": 0.01})}
BATCH_SIZE, STEPS = 4, 3
ATOL = 1e-6  # parameters within this of one process's
WALK_DEPTH = 4  # attribute levels searched for optimizers
NOT_A_PARAMETER = "(a tensor that is no parameter of the model)"


class ShardedOptimizer(torch.optim.Optimizer):
    """The answer: parameter i belongs to rank i % world_size; each rank builds the wrapped
    optimizer on the parameters it owns (none on a rank that owns nothing: an optimizer refuses
    an empty list), steps them, then every parameter is broadcast from its owner."""

    def __init__(self, params, optimizer_cls, **kwargs):
        super().__init__(params, kwargs)  # every parameter, so that zero_grad clears them all
        world_size, rank = dist.get_world_size(), dist.get_rank()
        everything = [p for group in self.param_groups for p in group["params"]]
        self.owners = [(p, i % world_size) for i, p in enumerate(everything)]
        mine = [p for p, owner in self.owners if owner == rank]
        self.local = optimizer_cls(mine, **kwargs) if mine else None

    def step(self, closure=None):
        if self.local is not None:
            loss = self.local.step(closure)
        else:  # nothing to step; a closure's forward and backward still run on every rank
            with torch.enable_grad():
                loss = closure() if closure is not None else None
        with torch.no_grad():
            for p, owner in self.owners:
                dist.broadcast(p, src=owner)
        return loss


def cases(world_size: int) -> list[tuple[int, dict]]:
    """SGD with momentum on 2 ranks (gradients divided twice show there, Adam hardly sees a
    scale), Adam on 3 ranks with 4 parameters (they do not divide), a model of 2 parameters on
    3 ranks (a rank owns none), then the size asked for, with 6 parameters."""
    return [(2, {"optimizer": "momentum", "layers": [8, 16, 4], "seed": 0}),
            (3, {"optimizer": "adam", "layers": [8, 16, 4], "seed": 1}),
            (3, {"optimizer": "adam", "layers": [6, 3], "seed": 2}),
            (world_size, {"optimizer": "adam", "layers": [8, 16, 8, 4], "seed": 3})]


def one_process(layers, optimizer: str, world_size: int, seed: int, scale: float = 1.0):
    """The parameters after ``STEPS`` steps of the plain optimizer on the whole global batches
    (mean loss) in one process, every gradient multiplied by ``scale`` first; and the bytes of
    each parameter's optimizer state."""
    model = make_model(layers, seed)
    cls, kwargs = OPTIMIZERS[optimizer]
    plain = cls(model.parameters(), **kwargs)
    for i in range(STEPS):
        plain.zero_grad()
        X, y = make_batch(layers, BATCH_SIZE, world_size, seed, i)
        F.mse_loss(model(X), y).backward()
        for p in model.parameters():
            p.grad *= scale
        plain.step()
    names = {id(p): n for n, p in model.named_parameters()}
    return ({n: p.detach().clone() for n, p in model.named_parameters()},
            state_bytes([plain], names))


def optimizers_in(obj, depth: int = WALK_DEPTH, seen: set | None = None) -> list:
    """Every ``torch.optim.Optimizer`` reachable from ``obj``: itself, its attributes, the items
    of the lists, tuples and dicts among them, ``depth`` levels down; no tensor, module or
    class is searched."""
    seen = set() if seen is None else seen
    if depth < 0 or id(obj) in seen or isinstance(
            obj, (torch.Tensor, torch.nn.Module, type, types.ModuleType, str, bytes)):
        return []
    seen.add(id(obj))
    found = [obj] if isinstance(obj, torch.optim.Optimizer) else []
    if isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple, set)):
        children = list(obj)
    else:
        children = list(getattr(obj, "__dict__", {}).values())
    for child in children:
        found += optimizers_in(child, depth - 1, seen)
    return found


def state_bytes(optimizers, names: dict) -> dict[str, int]:
    """Bytes of the optimizers' state by parameter name (``names``: id -> name), each storage
    once; a parameter without state has no entry."""
    ledger = Ledger()
    for optimizer in optimizers:
        for key, state in list(optimizer.state.items()):
            ledger.add(names.get(id(key), NOT_A_PARAMETER),
                       [value for value in state.values() if isinstance(value, torch.Tensor)])
    return ledger.bytes


def on_rank(ctx, solution, call_id: str, optimizer: str, layers: list[int], seed: int) -> dict:
    """This rank's parameters (before and after) and optimizer state after ``STEPS`` steps of
    DDP with the reader's optimizer."""
    world_size = ctx.world_size
    model = make_model(layers, seed).to(ctx.device)
    initial = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
    ddp = DDP(model)  # on the pool's group, formed before the reader's code
    cls, kwargs = OPTIMIZERS[optimizer]
    mine = slice(ctx.rank * BATCH_SIZE, (ctx.rank + 1) * BATCH_SIZE)
    started = [0]

    def note_broadcast(_, tensors, opts, *rest, **kwargs):  # so that a hang can name it
        started[0] += 1
        hang_watch.note(call_id, ctx.rank, broadcast=started[0], src=opts.rootRank)

    checker.enter(call_id, ctx.rank)
    with checker.watching(note_broadcast, "broadcast"):
        sharded = solution(model.parameters(), cls, **kwargs)
        for i in range(STEPS):
            X, y = make_batch(layers, BATCH_SIZE, world_size, seed, i)
            sharded.zero_grad()
            F.mse_loss(ddp(X[mine].to(ctx.device)), y[mine].to(ctx.device)).backward()
            sharded.step()
    checker.leave(call_id, ctx.rank)
    names = {id(p): n for n, p in model.named_parameters()}
    return {"got": {n: p.detach().cpu() for n, p in model.named_parameters()},
            "initial": initial, "state": state_bytes(optimizers_in(sharded), names)}


def case_label(world_size: int, params: dict) -> str:
    count = 2 * (len(params["layers"]) - 1)
    return (f"world size {world_size}, {params['optimizer']}, layers {params['layers']} "
            f"({count} parameters)")


def explain(world_size: int, params: dict, outcome) -> str | None:
    """A hang or a raise, with the case named: a raise where some rank owns no parameter, and
    a hang in the broadcasts (from the notes: how many each rank started, from which source),
    in words."""
    at = case_label(world_size, params)
    count = 2 * (len(params["layers"]) - 1)
    if not outcome.problem.startswith("hang"):
        if count >= world_size:
            return f"{at}: {outcome.problem}"
        return (f"{at}: {outcome.problem.rstrip('.')}. With {count} parameters on "
                f"{world_size} ranks some rank owns none, and a rank that owns none must still "
                "run: build optimizer_cls only on a rank that has parameters to step (an "
                "optimizer refuses an empty parameter list), let step() step nothing there, "
                "and let that rank still take part in every broadcast.")
    started = [[n for n in notes if "broadcast" in n] for notes in outcome.notes or []]
    if not any(started):
        return f"{at}: {outcome.problem}"
    last = "; ".join(f"rank {r}: {len(b)}, the last from src={b[-1]['src']}" if b else
                     f"rank {r}: none" for r, b in enumerate(started))
    return (f"{at}: hang in dist.broadcast. Broadcasts each rank started: {last}. A broadcast is a "
            "collective: every rank must call every broadcast, in the same order, the owner "
            "of the parameter as the source and every other rank to receive it "
            "(dist.broadcast(p, src=owner) on every rank, for every parameter).")


def close(a, b) -> bool:
    return np.allclose(a, b, rtol=0.0, atol=ATOL)


def judge(world_size: int, params: dict, results: list) -> str | None:
    """Against one process's run, made here once; and its runs with the gradients divided, or
    multiplied, by the world size: mistakes to name."""
    layers, optimizer, seed = params["layers"], params["optimizer"], params["seed"]
    want, want_state = one_process(layers, optimizer, world_size, seed)
    scaled = {} if world_size == 1 else {
        s: one_process(layers, optimizer, world_size, seed, s)[0] for s in (1 / world_size,
                                                                              world_size)}
    return (parameters_problem(world_size, params, results, want, scaled)
            or state_problem(world_size, params, results, want_state))


def parameters_problem(world_size: int, params: dict, results: list, want: dict,
                       scaled: dict) -> str | None:
    after, first = f"{case_label(world_size, params)}: after {STEPS} steps", results[0]
    for name in want:
        differ = [r for r, res in enumerate(results) if not close(res["got"][name],
                                                                  first["got"][name])]
        if differ:
            stale = [r for r, res in enumerate(results) if close(res["got"][name],
                                                                 res["initial"][name])]
            still = (f" ({checker.ranks_text(stale)} still hold{'s' * (len(stale) == 1)} its "
                     "initial value)") if stale else ""
            return (f"{after} parameter {name!r} differs between rank 0 and rank {differ[0]}"
                    f"{still}: each rank stepped its own share and the others never received "
                    "it. After the step, broadcast every parameter from the rank that stepped "
                    "it, on every rank (dist.broadcast(p, src=owner)).")
    moved = [n for n in want if not close(first["got"][n], first["initial"][n])]
    if not moved:
        return (f"{after} no parameter moved from its initial value: step() must step this "
                "rank's share with the wrapped optimizer (optimizer_cls built on the parameters "
                "this rank owns), then broadcast every parameter from its owner.")
    for name in want:  # a parameter left behind changes the others' gradients
        if name not in moved and not close(first["got"][name], want[name]):
            holders = [r for r, res in enumerate(results) if name in res["state"]]
            stepped = (f"rank {holders[0]}, which holds its optimizer state, stepped it, but "
                       if len(holders) == 1 else "")
            return (f"{after} parameter {name!r} is the same on every rank but never moved "
                    f"from its initial value: {stepped}it was broadcast from a rank that did "
                    "not step it. Broadcast each parameter from its owner (src=the rank that "
                    "stepped it), not from one rank for all.")
    for name, expected in want.items():
        got = first["got"][name]
        if close(got, expected):
            continue
        for scale, words in ((1 / world_size, "divided by"), (world_size, "multiplied by")):
            if scale in scaled and close(got, scaled[scale][name]):
                return (f"{after} parameter {name!r} is what one process gets with every "
                        f"gradient {words} the world size ({world_size}): DDP's backward "
                        "already averaged the gradients over the ranks (all-reduce, then "
                        "divide); step them as they are.")
        error = float(np.max(np.abs(np.asarray(got) - np.asarray(expected))))
        return (f"{after} parameter {name!r} differs from one process's (the plain optimizer "
                f"on the whole global batches) by up to {error:.3g}, on every rank.")
    return None


def state_problem(world_size: int, params: dict, results: list, want: dict) -> str | None:
    at = case_label(world_size, params)
    full, held = sum(want.values()), [sum(res["state"].values()) for res in results]
    if world_size > 1 and all(h >= full for h in held):
        return (f"{at}: every rank holds the whole optimizer state ({full} bytes on each of the "
                f"{world_size} ranks), as a plain optimizer does: each rank should keep the "
                f"state of its own share of the parameters only (about 1/{world_size} of it), "
                "step that share, and broadcast it.")
    if not any(held):
        return (f"{at}: the checker finds no optimizer state on any rank: build optimizer_cls "
                "on this rank's share and keep it in an attribute of your optimizer (the "
                "checker counts the state of the torch.optim.Optimizer objects it holds).")
    for name in want:
        on = [r for r, res in enumerate(results) if name in res["state"]]
        if len(on) > 1:
            return (f"{at}: the optimizer state of parameter {name!r} is held on ranks {on}: "
                    f"each parameter's state belongs on one rank, the one that steps it "
                    f"({sum(held)} bytes over the ranks, the plain optimizer {full}).")
    if sum(held) != full:
        return (f"{at}: the ranks hold {sum(held)} bytes of optimizer state together, the plain "
                f"optimizer {full} ({held} by rank): each parameter's state must be held "
                "exactly once, by the rank that steps it.")
    largest = math.ceil(len(want) / world_size)
    share = sum(sorted(want.values(), reverse=True)[:largest])
    for rank, nbytes in enumerate(held):
        if nbytes > share:
            return (f"{at}: rank {rank} holds {nbytes} of the {full} bytes of optimizer state, "
                    f"more than a share ({share} bytes, the state of the {largest} largest of "
                    f"the {len(want)} parameters): spread the parameters over all the ranks.")
    return None


EXERCISE = Exercise(
    name="shard-optimizer", lab="labs/07_memory.ipynb", function="ShardedOptimizer",
    signature=("class ShardedOptimizer(torch.optim.Optimizer): __init__(params, optimizer_cls, "
               "**kwargs), step(closure=None), zero_grad()"),
    against=("one process with the plain optimizer on the whole global batches, each parameter's "
             "optimizer state held on one rank"),
    answer=ShardedOptimizer, cases=cases, on_rank=on_rank, judge=judge, explain=explain)
