"""Exercise ``ring-allreduce``: ``dist.all_reduce`` built from point-to-point sends.

The reader writes ``ring_all_reduce(tensor)``: every rank passes its own 1-D float tensor (of
the same length on every rank) and the function sums it over the ranks in place, with
``dist.send``/``dist.recv`` (or ``isend``/``irecv``) alone: a reduce-scatter, ``N - 1`` steps in
which each rank sends one chunk of about ``1/N`` of the tensor to the next rank and adds the one
it receives, then an all-gather, ``N - 1`` steps that pass the summed chunks on. Each rank then
sends ``2(N-1)/N`` of the tensor, whatever ``N`` (the time-cost chapter's bus bandwidth).

Rank ``r``'s tensor is ``r + 1`` plus uniform noise from a seed, so the caller computes the sum
from the case, not by a collective. The checker passes a solution whose every rank holds the sum
(within the rounding that another summation order may give), that called no collective, and in
which no rank sent more than ``2(N-1)`` chunks of ``ceil(L/N)`` elements. A spy on
``ProcessGroup.send``, ``recv`` and the collectives (:func:`checker.watching`), for the reader's
code only, counts the elements each rank sends and notes each operation, so that a hang says
where every rank waited (:func:`explain`). ``dist.send``, ``dist.isend`` and
``dist.batch_isend_irecv`` all end in ``ProcessGroup.send``; a spy in place of ``dist.isend``
itself would count nothing more, and ``batch_isend_irecv`` would refuse it (``P2POp`` accepts
``isend`` and ``irecv`` themselves only).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
import torch.distributed as dist

from ddplab.engine import hang_watch
from ddplab.exercises import checker
from ddplab.exercises.record import Exercise

FIXED_CASES = [  # (world size, length, dtype)
    (2, 8, "float32"),  # chunks of 4: the length divisible by the world size
    (3, 10, "float64"),  # chunks of 4, 3, 3
    (4, 3, "float32"),  # shorter than the world size: one chunk empty
    (4, 1001, "float32"),  # longer, and 1001 = 4 x 250 + 1
]
P2P = ("send", "recv", "recv_anysource")
COLLECTIVES = {  # ProcessGroup's method: the torch.distributed function that calls it
    "allreduce": "all_reduce", "allreduce_coalesced": "all_reduce_coalesced",
    "reduce": "reduce", "broadcast": "broadcast", "allgather": "all_gather",
    "allgather_coalesced": "all_gather_coalesced",
    "_allgather_base": "all_gather_into_tensor", "all_gather_single": "all_gather_into_tensor",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor", "gather": "gather",
    "scatter": "scatter", "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_single": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor", "alltoall": "all_to_all",
    "alltoall_base": "all_to_all_single", "all_to_all_single": "all_to_all_single"}


def ring_all_reduce(tensor: torch.Tensor) -> None:
    """The answer: ``world_size`` chunks (views: writing one writes the tensor). In step ``s``
    of the reduce-scatter rank ``r`` sends chunk ``r - s`` to rank ``r + 1`` and adds chunk
    ``r - s - 1`` from rank ``r - 1`` into its own; after ``N - 1`` steps it holds the whole sum
    of chunk ``r + 1``. The all-gather passes the summed chunks on the same way, copying. Each
    send is posted with ``isend`` before the ``recv``: gloo's blocking send waits for the
    receiver, and if every rank sent first, none would ever receive."""
    world_size, rank = dist.get_world_size(), dist.get_rank()
    send_to, receive_from = (rank + 1) % world_size, (rank - 1) % world_size
    chunks = torch.tensor_split(tensor, world_size)  # lengths differ by one at most
    received = torch.empty_like(chunks[0])
    for gather in (False, True):
        for step in range(world_size - 1):
            out = (rank - step + gather) % world_size
            into = chunks[(out - 1) % world_size]
            incoming = received[:len(into)]
            sending = dist.isend(chunks[out], send_to)
            dist.recv(incoming, receive_from)
            sending.wait()
            if gather:
                into.copy_(incoming)
            else:
                into += incoming


def cases(world_size: int) -> list[tuple[int, dict]]:
    """The fixed cases, then one on the size asked for, of length ``2N + 1``."""
    return [(size, {"length": length, "dtype": dtype, "seed": seed})
            for seed, (size, length, dtype) in enumerate(
                FIXED_CASES + [(world_size, 2 * world_size + 1, "float32")])]


def rank_tensor(rank: int, length: int, dtype: str, seed: int) -> torch.Tensor:
    """What rank ``rank`` passes: ``rank + 1`` plus noise in [0, 1), the same in any process."""
    noise = torch.rand(length, generator=torch.Generator().manual_seed(1000 * seed + rank),
                       dtype=torch.float64)
    return (noise + rank + 1).to(getattr(torch, dtype))


def most_sent(world_size: int, length: int) -> int:
    """The ring's volume per rank: ``2(N-1)`` steps of one chunk, ``ceil(L/N)`` at most."""
    return 2 * (world_size - 1) * math.ceil(length / world_size)


def ring_device(ctx) -> torch.device:
    """Where the ring's tensors live: the rank's device on NCCL, the host on gloo. gloo's
    collectives take CUDA tensors, but its ``send`` and ``recv`` of a CUDA tensor aborted the
    process (one H200, torch 2.11.0+cu130, two ranks on cuda:0: ``gloo/transport/tcp/
    pair.cc:339 writev ... Bad address``, then SIGABRT; ``isend``/``irecv`` alike).
    ``ProcessGroupGloo::send`` and ``recv`` hand the tensor's own pointer to gloo's TCP pair
    (``createUnboundBuffer(tensor.const_data_ptr(), size)``, torch/csrc/distributed/c10d/
    ProcessGroupGloo.cpp), where the collectives have CUDA work that goes through host memory;
    ``writev`` of a GPU address fails with EFAULT. So on gloo the exercise hands the ring host
    tensors, as a script of yours that sends with gloo must."""
    return ctx.device if ctx.backend == "nccl" else torch.device("cpu")


def on_rank(ctx, solution, call_id: str, length: int, dtype: str, seed: int) -> dict:
    """This rank's tensor after ``solution``, what it sent and the collectives it called, as
    plain data. Nothing follows the reader's code: no collective of ours can pair with one of
    theirs."""
    tensor = rank_tensor(ctx.rank, length, dtype, seed).to(ring_device(ctx))
    sent, collectives = [], []

    def see(method, tensors, *args, **kwargs):
        if method in P2P:
            elements = sum(t.numel() for t in tensors)
            peer = args[0] if args and method != "recv_anysource" else None
            if method == "send":
                sent.append({"to": peer, "elements": elements})
            hang_watch.note(call_id, ctx.rank, p2p=method, peer=peer, elements=elements)
        else:
            collectives.append(COLLECTIVES[method])
            hang_watch.note(call_id, ctx.rank, collective=COLLECTIVES[method])

    watched = [m for m in (*P2P, *COLLECTIVES) if m in dist.ProcessGroup.__dict__]
    checker.enter(call_id, ctx.rank)
    with checker.watching(see, *watched):
        returned = solution(tensor)
    checker.leave(call_id, ctx.rank)
    if not isinstance(returned, torch.Tensor) or returned.shape != tensor.shape:
        returned = None  # what the reader returns is only looked at when the tensor is wrong
    return {"values": tensor.detach().cpu().double().numpy(), "sent": sent,
            "collectives": collectives,
            "returned": None if returned is None else returned.detach().cpu().double().numpy()}


def case_label(world_size: int, params: dict) -> str:
    return f"world size {world_size}, {params['length']} elements, {params['dtype']}"


def expected(world_size: int, params: dict) -> tuple[np.ndarray, np.ndarray]:
    """The sum over the ranks, and how far from it a sum in another order may land: each of
    the ``N - 1`` additions rounds by at most ``eps`` times the sum of magnitudes, here and in
    the reader's order."""
    tensors = np.stack([rank_tensor(r, params["length"], params["dtype"], params["seed"])
                        .double().numpy() for r in range(world_size)])
    eps = torch.finfo(getattr(torch, params["dtype"])).eps
    return tensors.sum(axis=0), 2 * world_size * eps * np.abs(tensors).sum(axis=0)


def judge(world_size: int, params: dict, results: list) -> str | None:
    head = case_label(world_size, params)
    used = sorted({name for result in results for name in result["collectives"]})
    if used:
        ranks = [r for r, result in enumerate(results) if result["collectives"]]
        return f"{head}: {uses(used, ranks)}."
    want, tolerance = expected(world_size, params)
    for rank, result in enumerate(results):
        problem = wrong_values(rank, result, want, tolerance, world_size, params)
        if problem:
            return f"{head}: {problem}"
    return too_much_sent(world_size, params, [r["sent"] for r in results])


def uses(collectives: list[str], ranks: list[int] | None = None) -> str:
    on = f" (on rank(s) {ranks})" if ranks else ""
    return (f"ring_all_reduce uses {', '.join(collectives)}{on}; the point is to build it "
            "from send/recv (dist.isend, dist.recv), with no collective")


def wrong_values(rank: int, result: dict, want: np.ndarray, tolerance: np.ndarray,
                 world_size: int, params: dict) -> str | None:
    """What is wrong with rank ``rank``'s tensor, the mistake named where it matches one."""
    values, length = result["values"], params["length"]
    right = np.abs(values - want) <= tolerance
    if right.all():
        return None
    own = rank_tensor(rank, length, params["dtype"], params["seed"]).double().numpy()
    if np.array_equal(values, own):
        returned = result["returned"]
        said = ("returned the sum but left" if returned is not None
                and np.all(np.abs(returned - want) <= tolerance) else "left")
        return (f"rank {rank} {said} its tensor as it was: ring_all_reduce sums in place, "
                "into the tensor it is given (chunk += received, chunk.copy_(received)); "
                "chunk = chunk + received makes a new tensor and leaves the given one as it was.")
    if world_size > 1 and np.all(np.abs(values - want / world_size) <= tolerance):
        return (f"rank {rank} holds the sum divided by the world size ({world_size}): the "
                "average. all_reduce sums (ReduceOp.SUM); leave out the division.")
    at = np.flatnonzero(right)
    if len(at) and at[-1] - at[0] + 1 == len(at) and len(at) in (
            length // world_size, math.ceil(length / world_size)):
        return (f"rank {rank} holds the sum only at elements {at[0]} to {at[-1]}, one chunk "
                f"of the {length}, where the reduce-scatter leaves it; the all-gather phase is "
                f"missing: {world_size - 1} more step{'s' * (world_size > 2)} in which each "
                "rank sends the summed "
                "chunk it has to the next rank and copies (not adds) the one it receives.")
    first = int(np.flatnonzero(~right)[0])
    return (f"rank {rank}, element {first}: {values[first]:.9g}, want {want[first]:.9g}, "
            f"{whose(first, values[first], tolerance[first], world_size, params)}; "
            f"{int((~right).sum())} of {length} elements are wrong.")


def whose(i: int, value: float, tolerance: float, world_size: int, params: dict) -> str:
    """Which ranks' values at element ``i`` add up to ``value``, if some do."""
    terms = [float(rank_tensor(r, params["length"], params["dtype"], params["seed"])[i])
             for r in range(world_size)]
    for count in range(world_size + 1):
        for ranks in itertools.combinations(range(world_size), count):
            if abs(sum(terms[r] for r in ranks) - value) <= tolerance:
                return f"the sum of rank(s) {list(ranks)}'s values only"
    return f"the sum of all {world_size} ranks' values"


def too_much_sent(world_size: int, params: dict, sent: list[list[dict]]) -> str | None:
    """None when no rank sent more than the ring does; else the rank that sent the most, what
    it sent and what the ring sends."""
    length, limit = params["length"], most_sent(world_size, params["length"])
    volumes = [sum(s["elements"] for s in sends) for sends in sent]
    rank = int(np.argmax(volumes))
    if volumes[rank] <= limit:
        return None
    sends = sent[rank]
    sizes, to = sorted({s["elements"] for s in sends}), sorted({s["to"] for s in sends})
    others = [r for r in range(world_size) if r != rank]
    if all({s["to"] for s in sent[r]} == set(range(world_size)) - {r} for r in range(world_size)):
        what = "every rank sent its whole tensor to every other rank"
    elif all({s["to"] for s in sent[r]} <= {rank} for r in others):
        what = f"the tensors went to rank {rank}, and rank {rank} sent the sum to every rank"
    else:
        what = f"rank {rank} sent {len(sends)} messages of {sizes} elements to rank(s) {to}"
    return (f"{case_label(world_size, params)}: rank {rank} sent {volumes[rank]} elements, "
            f"{volumes[rank] / length:.3g} times its tensor ({what}). The ring sends each rank "
            f"2(N-1)/N = {2 * (world_size - 1) / world_size:.3g} times the tensor, whatever N: "
            f"2(N-1) = {2 * (world_size - 1)} steps of one chunk of at most "
            f"ceil({length}/{world_size}) = {math.ceil(length / world_size)} elements, "
            f"{limit} in all, each to the next rank. Split the tensor in {world_size} chunks "
            "and pass one chunk a step.")


def explain(world_size: int, params: dict, outcome) -> str | None:
    """A hang or a raise, in words: the collectives the reader called, and where each rank
    waited (its last send or receive, from the notes). None: nothing to add."""
    notes = outcome.notes
    if not notes or not any("entered" in n for rank_notes in notes for n in rank_notes):
        return None  # it ended before the reader's code began
    used = sorted({n["collective"] for rank_notes in notes for n in rank_notes
                   if "collective" in n})
    hung = outcome.problem.startswith("hang")
    stuck = [r for r in range(world_size) if hung and not any("left" in n for n in notes[r])]
    last = {r: next((n for n in reversed(notes[r]) if "p2p" in n), None) for r in stuck}
    words = [uses(used) + "."] if used else []
    if stuck and len(stuck) == world_size and all(n and n["p2p"] == "send" for n in last.values()):
        waits = ", ".join(f"rank {r} in a send to rank {last[r]['peer']}" for r in stuck)
        return (f"{case_label(world_size, params)}: {outcome.problem.split(';')[0]}: every rank "
                f"sends before it receives ({waits}), and none reaches its recv: gloo's send "
                "returns only once the receiver has posted its recv, whatever the size. Post "
                "the send with dist.isend, then recv, then wait on the send (or let even ranks "
                "send first and odd ranks receive first). " + " ".join(words)).strip()
    if stuck and any(last.values()):
        words.append("Where the ranks waited: " + ", ".join(
            f"rank {r} in a {n['p2p'].replace('_anysource', '')} "
            f"{'to' if n['p2p'] == 'send' else 'from'} rank {n['peer']}"
            for r, n in last.items() if n) + ".")
    if not words:
        return None
    return f"{case_label(world_size, params)}: {outcome.problem} {' '.join(words)}"


EXERCISE = Exercise(
    name="ring-allreduce", lab="labs/00_running.ipynb", function="ring_all_reduce",
    signature="ring_all_reduce(tensor) -> None",
    against=("the sum over the ranks, each rank sending at most 2(N-1) chunks of about 1/N of the "
             "tensor and calling no collective"),
    answer=ring_all_reduce, cases=cases, on_rank=on_rank, judge=judge, explain=explain)
