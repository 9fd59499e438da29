"""Exercise ``gather-unequal``: every rank's predictions, when the shards differ in length.

A metric that is not a sum (AUC, F1, a median) needs every prediction at once, but a validation
set sharded without padding leaves the last ranks one prediction short, and ``dist.all_gather``
wants equal sizes (gloo: "ProcessGroupGloo::allgather: invalid tensor size"). The reader writes
``gather_unequal(tensor) -> torch.Tensor``: every rank passes its own 1-D tensor (of any length,
0 included) and gets back every rank's, concatenated in rank order. Rank ``r`` holds
``r * 100 + 0, 1, ...``, so a value says whose it is and where it stood; the expected result is
computed in the caller from the case, not by a collective.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ddplab.exercises import checker
from ddplab.exercises.record import Exercise

FIXED_CASES = [  # (length of each rank's tensor, dtype)
    ([4, 3, 3], "float64"),  # 10 predictions on 3 ranks, sharded without padding
    ([3, 4], "int64"),  # the shorter one first
    ([0, 2, 1], "float64"),  # a rank with nothing to give
    ([2, 2, 2], "int64"),  # equal lengths: nothing to pad
]
SHOWN = 12  # values a message prints at most
UNEQUAL_SIZES = ("invalid tensor size",  # gloo, when the output list's sizes differ from the input
                 "Received data size doesn't match expected size")  # gloo, between ranks


def gather_unequal(tensor: torch.Tensor) -> torch.Tensor:
    """The answer: the lengths first (one number per rank, so all of equal size), then every
    tensor padded to the longest and gathered; position i of rank r's piece is kept when i is
    below rank r's length, which leaves the pieces trimmed and in rank order."""
    world_size = dist.get_world_size()
    length = torch.tensor([len(tensor)], device=tensor.device)
    lengths = [torch.empty_like(length) for _ in range(world_size)]
    dist.all_gather(lengths, length)
    lengths = torch.cat(lengths)
    longest = int(lengths.max())
    padded = torch.cat([tensor, tensor.new_zeros(longest - len(tensor))])
    pieces = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(pieces, padded)
    keep = torch.arange(longest, device=tensor.device) < lengths[:, None]
    return torch.stack(pieces)[keep]


def cases(world_size: int) -> list[tuple[int, dict]]:
    """The fixed cases on 3 and 2 ranks, then one on the size asked for, lengths 1, 3, 2, ..."""
    asked = [1 + 2 * rank % 3 for rank in range(world_size)]
    return [(len(lengths), {"lengths": lengths, "dtype": dtype})
            for lengths, dtype in FIXED_CASES + [(asked, "int64")]]


def piece(rank: int, length: int) -> list[int]:
    """What rank ``rank`` passes: its number in the hundreds, the position in the units."""
    return [100 * rank + i for i in range(length)]


def expected(lengths: list[int]) -> list[int]:
    return [v for rank, length in enumerate(lengths) for v in piece(rank, length)]


def kind(value) -> str:
    name = type(value).__name__
    return "None" if value is None else f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def on_rank(ctx, solution, call_id: str, lengths: list[int], dtype: str) -> dict:
    """What ``solution`` returns on this rank, as plain data. Nothing follows the reader's code
    but this description: no collective of ours can pair with one of theirs."""
    mine = torch.tensor(piece(ctx.rank, lengths[ctx.rank]), dtype=getattr(torch, dtype),
                        device=ctx.device)
    checker.enter(call_id, ctx.rank)
    result = solution(mine)
    checker.leave(call_id, ctx.rank)
    if not isinstance(result, torch.Tensor):
        return {"type": kind(result)}
    return {"type": "tensor", "dtype": str(result.dtype).removeprefix("torch."),
            "shape": list(result.shape), "values": result.detach().cpu().flatten().tolist()}


def case_label(world_size: int, params: dict) -> str:
    return f"world size {world_size}, lengths {params['lengths']}, {params['dtype']}"


def explain(world_size: int, params: dict, outcome) -> str | None:
    """A raise, in words: ``all_gather`` handed tensors of different sizes. Hangs and other
    raises stay as :func:`checker.run_case` put them (None)."""
    problem = outcome.problem
    said = [i for i, line in enumerate(problem.splitlines())
            if any(words in line for words in UNEQUAL_SIZES)]
    if not said:
        return None
    lines = [" ".join(line.split()) for line in problem.splitlines()]
    what = lines[0] if said[0] == 0 else f"{lines[0]} {lines[said[0]]}"  # a killed rank's log
    return (f"{case_label(world_size, params)}: all_gather needs equal sizes: gather the lengths, "
            f"pad to the largest, then trim. What happened: {what}")


def judge(world_size: int, params: dict, results: list) -> str | None:
    lengths, dtype = params["lengths"], params["dtype"]
    want = expected(lengths)
    right = [got["type"] == "tensor" and got["shape"] == [len(want)]
             and got["values"] == want and got["dtype"] == dtype for got in results]
    for rank, got in enumerate(results):
        if not right[rank]:
            problem = ((right[0] and only_on_rank_0(rank, got, lengths))
                       or mistake(rank, got, lengths, dtype))
            return f"{case_label(world_size, params)}: {problem}"
    return None


def only_on_rank_0(rank: int, got: dict, lengths: list[int]) -> str | None:
    """Rank 0 right, and rank ``rank`` given nothing or only its own values back."""
    if got["type"] == "tensor" and got["values"] not in ([], piece(rank, lengths[rank])):
        return None
    what = (f"returned {got['type']}" if got["type"] != "tensor" else "got nothing back"
            if not got["values"] else f"got back only its own {lengths[rank]} values")
    return (f"rank 0 has all {sum(lengths)} values, but rank {rank} {what}: every rank needs "
            "the result (all_gather on every rank, not a gather to rank 0 or a result kept "
            "on rank 0 only).")


def mistake(rank: int, got: dict, lengths: list[int], dtype: str) -> str:
    """What is wrong with rank ``rank``'s result, the mistake named where it matches one."""
    want, head = expected(lengths), f"rank {rank}"
    if got["type"] != "tensor":
        hint = ("torch.cat the pieces into one tensor" if got["type"] in ("a list", "a tuple")
                else "return the gathered tensor")
        return f"{head} returned {got['type']}, not a tensor: {hint}."
    values, shape = got["values"], got["shape"]
    if len(shape) != 1:
        return (f"{head}'s result has shape {tuple(shape)}, want ({len(want)},): one 1-D "
                "tensor, the trimmed pieces concatenated (torch.cat), not stacked.")
    if len(values) != len(want):
        return (f"{head} got {len(values)} values, want {len(want)}: "
                f"{count_mistake(values, lengths)}")
    if values != want and sorted(values) == sorted(want):
        return (f"{head} got the right values in the wrong order: "
                f"{order_mistake(values, lengths)}")
    if values != want:
        return f"{head} got {show(values)}, want {show(want)}."
    return (f"{head}'s result is {got['dtype']}, want {dtype}, the input's dtype: make the "
            "padding and the gathered buffers from the input (tensor.new_zeros, "
            "torch.empty_like).")


def count_mistake(values: list, lengths: list[int]) -> str:
    longest, world_size = max(lengths), len(lengths)
    blocks = [values[r * longest:r * longest + n] for r, n in enumerate(lengths)]
    if len(values) == world_size * longest and blocks == [piece(r, n)
                                                          for r, n in enumerate(lengths)]:
        padding = [r * longest + i for r, n in enumerate(lengths) for i in range(n, longest)]
        return (f"the padding is still there at positions {padding} (every piece padded to "
                f"the longest, {longest}): trim rank r's piece back to its length, "
                "lengths[r], before concatenating.")
    want = expected(lengths)
    missing = [v for v in want if v not in values]
    extra = [v for v in values if v not in want]
    said = [f"missing {whose(missing)}" if missing else "",
            f"{len(extra)} values that are no rank's: {show(extra)}" if extra else "",
            "some values twice" if not missing and not extra else ""]
    return "; ".join(s for s in said if s) + "."


def order_mistake(values: list, lengths: list[int]) -> str:
    """The order of the ranks' pieces, when the values come piece by piece; else the first
    position that differs."""
    order = []
    for v in values:
        if not order or order[-1] != int(v) // 100:
            order.append(int(v) // 100)
    ranks = [r for r, n in enumerate(lengths) if n]
    want = expected(lengths)
    if sorted(order) == ranks and values == [v for r in order for v in piece(r, lengths[r])]:
        reverse = " (reversed)" if order == ranks[::-1] else ""
        return (f"the pieces come from ranks {order}{reverse}, want {ranks}: element r of "
                "all_gather's list is rank r's piece; concatenate the list as it is.")
    first = next(i for i, (v, w) in enumerate(zip(values, want)) if v != w)
    return f"position {first} holds {whose([values[first]])}, want {whose([want[first]])}."


def whose(values: list) -> str:
    """Values named by the rank and position they came from: 201 is rank 2's value at 1."""
    named = [f"rank {int(v) // 100}'s value at {int(v) % 100}" for v in values[:SHOWN]]
    return ", ".join(named) + (f" and {len(values) - SHOWN} more" if len(values) > SHOWN else "")


def show(values: list) -> str:
    return str(values[:SHOWN])[:-1] + (", ...]" if len(values) > SHOWN else "]")


EXERCISE = Exercise(
    name="gather-unequal", lab="labs/08_training_loop.ipynb", function="gather_unequal",
    signature="gather_unequal(tensor) -> torch.Tensor",
    against="every rank's tensor concatenated in rank order",
    answer=gather_unequal, cases=cases, on_rank=on_rank, judge=judge, explain=explain)
