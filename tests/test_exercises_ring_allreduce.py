"""Exercise ``ring-allreduce``: the answer and other rings (even/odd blocking sends, chunks of
ceil(L/N) with one empty, batch_isend_irecv the other way round) pass; the spy counts what each
rank really sends; the mistakes (a collective, whole tensors to every rank or through rank 0,
no all-gather, an average, a new tensor instead of the given one, a blocking send first on
every rank, which hangs on gloo) are each rejected with a message that names them; the command
prints JSON; the lab's hidden cell holds the answer."""

import inspect
import json
import re
import textwrap
import time
import types

import numpy as np
import pytest
import torch

from conftest import alive, descendants
from ddplab import exercises
from ddplab.__main__ import main
from ddplab.exercises import checker, ring_allreduce

NAME = "ring-allreduce"
ANSWER = ring_allreduce.EXERCISE.answer
SOURCE = inspect.getsource(ANSWER)
IMPORTS = "import torch\nimport torch.distributed as dist\n\n\n"
HANG_TIMEOUT = 2.0


def cell(source: str):
    """``ring_all_reduce`` as a notebook cell defines it, shipped to the ranks by value."""
    namespace = {"__name__": "__main__"}
    exec(compile(IMPORTS + textwrap.dedent(source), "<cell>", "exec"), namespace)
    return namespace["ring_all_reduce"]


def answer_with(old: str, new: str) -> str:
    """The answer with one line changed: a mistake one edit away from a right answer."""
    assert old in SOURCE
    return SOURCE.replace(old, new)


OTHER_RINGS = {
    "even ranks send first, odd ranks receive first; chunks of ceil(L/N)": """
        def ring_all_reduce(tensor):
            rank, n = dist.get_rank(), dist.get_world_size()
            size = -(-len(tensor) // n)  # ceil: the last chunks may be short or empty
            def chunk(i):
                return tensor[(i % n) * size:(i % n + 1) * size]
            for phase in range(2):
                for step in range(n - 1):
                    out, into = chunk(rank - step + phase), chunk(rank - step - 1 + phase)
                    got = torch.empty_like(into)
                    if rank % 2 == 0:
                        dist.send(out, (rank + 1) % n)
                        dist.recv(got, (rank - 1) % n)
                    else:
                        dist.recv(got, (rank - 1) % n)
                        dist.send(out, (rank + 1) % n)
                    if phase == 0:
                        into += got
                    else:
                        into.copy_(got)
        """,
    "batch_isend_irecv, to the rank before": """
        def ring_all_reduce(tensor):
            rank, n = dist.get_rank(), dist.get_world_size()
            chunks = torch.tensor_split(tensor, n)
            for phase in range(2):
                for step in range(n - 1):
                    out = (rank + step - phase) % n
                    into = chunks[(out + 1) % n]
                    got = torch.empty_like(into)
                    for work in dist.batch_isend_irecv([
                            dist.P2POp(dist.isend, chunks[out], (rank - 1) % n),
                            dist.P2POp(dist.irecv, got, (rank + 1) % n)]):
                        work.wait()
                    if phase == 0:
                        into += got
                    else:
                        into.copy_(got)
        """,
}

VOLUME = (r"The ring sends each rank 2\(N-1\)/N = 1.33 times the tensor, whatever N: 2\(N-1\) "
          r"= 4 steps of one chunk of at most ceil\(10/3\) = 4 elements, 16 in all")
WRONG = {
    "all_reduce": ("""
        def ring_all_reduce(tensor):
            dist.all_reduce(tensor)
        """, 2, r"^world size 2, 8 elements, float32: ring_all_reduce uses all_reduce \(on "
                r"rank\(s\) \[0, 1\]\); the point is to build it from send/recv"),
    "whole tensor to every rank": ("""
        def ring_all_reduce(tensor):
            rank, n = dist.get_rank(), dist.get_world_size()
            works = [dist.isend(tensor.clone(), r) for r in range(n) if r != rank]
            total = tensor.clone()
            for r in range(n):
                if r != rank:
                    got = torch.empty_like(tensor)
                    dist.recv(got, r)
                    total += got
            for work in works:
                work.wait()
            tensor.copy_(total)
        """, 3, r"^world size 3, 10 elements, float64: rank 0 sent 20 elements, 2 times its "
                r"tensor \(every rank sent its whole tensor to every other rank\)\. " + VOLUME),
    "gather to rank 0, then broadcast": ("""
        def ring_all_reduce(tensor):
            rank, n = dist.get_rank(), dist.get_world_size()
            if rank == 0:
                for r in range(1, n):
                    got = torch.empty_like(tensor)
                    dist.recv(got, r)
                    tensor += got
                for r in range(1, n):
                    dist.send(tensor, r)
            else:
                dist.send(tensor, 0)
                dist.recv(tensor, 0)
        """, 3, r"rank 0 sent 20 elements, 2 times its tensor \(the tensors went to rank 0, and "
                r"rank 0 sent the sum to every rank\)\. " + VOLUME),
    "reduce-scatter only": (answer_with("for gather in (False, True):", "for gather in (False,):"),
                            2, r"rank 0 holds the sum only at elements 4 to 7, one chunk of the "
                               r"8, where the reduce-scatter leaves it; the all-gather phase is "
                               r"missing"),
    "average": (SOURCE + "    tensor /= world_size\n", 2,
                r"rank 0 holds the sum divided by the world size \(2\): the average"),
    "a new tensor returned": (answer_with("    world_size, rank =", "    tensor = tensor.clone()\n"
                                          "    world_size, rank =") + "    return tensor\n", 2,
                              r"rank 0 returned the sum but left its tensor as it was: "
                              r"ring_all_reduce sums in place"),
}


def test_the_cases_cover_sizes_lengths_and_dtypes():
    cases = ring_allreduce.cases(5)
    assert [size for size, _ in cases] == [2, 3, 4, 4, 5]
    lengths = [(size, params["length"]) for size, params in cases]
    assert any(length % size == 0 for size, length in lengths)
    assert any(length % size for size, length in lengths if length > size)
    assert any(length < size for size, length in lengths)  # some chunks empty
    assert {params["dtype"] for _, params in cases} == {"float32", "float64"}


def test_the_answer_passes_on_the_size_asked_for_too():
    verdict = exercises.check(NAME, ANSWER, world_size=5)
    assert verdict.passed, verdict.message
    assert verdict.message.startswith("5 cases on world sizes [2, 3, 4, 5] agree with the sum")


@pytest.mark.parametrize("kind", list(OTHER_RINGS))
def test_other_rings_pass(kind):
    verdict = exercises.check(NAME, cell(OTHER_RINGS[kind]), world_size=5, timeout=5)
    assert verdict.passed, verdict.message


def test_the_ring_sends_2_n_minus_1_over_n_and_sums_in_another_order():
    """Counted by the spy, through isend and through batch_isend_irecv alike: the ranks
    together send 2(N-1) x L elements. The float32 sum differs from one process's in the last
    bits (so the comparison allows for rounding), and the checker still finds an error of 1e-3."""
    world_size, params = 4, {"length": 1001, "dtype": "float32", "seed": 3}
    for solution in (ANSWER, cell(OTHER_RINGS["batch_isend_irecv, to the rank before"])):
        outcome = checker.run_case(ring_allreduce.on_rank, world_size, 10, "ring_all_reduce",
                                   solution=solution, **params)
        sent = [sum(s["elements"] for s in r["sent"]) for r in outcome.results]
        assert sum(sent) == 2 * (world_size - 1) * 1001
        assert max(sent) <= ring_allreduce.most_sent(world_size, 1001) == 1506
        assert ring_allreduce.judge(world_size, params, outcome.results) is None
    one_process = torch.stack([ring_allreduce.rank_tensor(r, **params)
                               for r in range(world_size)]).sum(0).double().numpy()
    got = outcome.results[0]["values"]
    assert not np.array_equal(got, one_process)
    outcome.results[2]["values"][17] += 1e-3
    assert "rank 2, element 17:" in ring_allreduce.judge(world_size, params, outcome.results)


@pytest.mark.parametrize("kind", list(WRONG))
def test_a_wrong_solution_is_rejected_naming_the_mistake(kind):
    source, world_size, match = WRONG[kind]
    verdict = exercises.check(NAME, cell(source), timeout=5)
    assert not verdict.passed
    assert verdict.case["world_size"] == world_size
    assert re.search(match, verdict.message), verdict.message


def test_the_command_prints_json(tmp_path, capsys):
    """``main`` in this process, where the pool is warm (tests/test_exercises.py runs the
    command in a process of its own)."""
    right = tmp_path / "right.py"
    right.write_text(IMPORTS + SOURCE)
    assert main(["exercise", NAME, "--solution", str(right), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is True and report["name"] == NAME


def test_sending_first_on_every_rank_hangs_and_is_named():
    """Gloo's blocking send waits for the receiver's recv, whatever the size: a ring in which
    every rank sends before it receives never gets going. Last here: the hang ends the pool's
    ranks, and the next call starts fresh ones."""
    exercises.check(NAME, ANSWER)  # the pool warm
    before = descendants()
    start = time.monotonic()
    verdict = exercises.check(NAME, cell(answer_with(
        """            sending = dist.isend(chunks[out], send_to)
            dist.recv(incoming, receive_from)
            sending.wait()
""", """            dist.send(chunks[out], send_to)
            dist.recv(incoming, receive_from)
""")), timeout=HANG_TIMEOUT)
    assert time.monotonic() - start < HANG_TIMEOUT + 5
    assert not verdict.passed
    assert verdict.message.startswith(
        "world size 2, 8 elements, float32: hang: every rank (of 2) was still inside "
        "ring_all_reduce after "), verdict.message
    assert ("every rank sends before it receives (rank 0 in a send to rank 1, rank 1 in a "
            "send to rank 0), and none reaches its recv") in verdict.message
    gone = before - descendants()
    assert gone and not any(alive(pid) for pid in gone)  # the hung ranks were ended


def test_the_ring_gets_host_tensors_on_gloo_and_the_ranks_gpu_on_nccl():
    """gloo's send/recv of a CUDA tensor aborted the rank on an H200 (its collectives took
    CUDA tensors): on gloo with CUDA tensors the ring is handed host tensors; on NCCL, whose
    send/recv need CUDA tensors, the rank's own GPU."""
    def ctx(backend, device):  # what ring_device reads of a RankContext
        return types.SimpleNamespace(backend=backend, device=torch.device(device))

    assert ring_allreduce.ring_device(ctx("gloo", "cuda:1")) == torch.device("cpu")
    assert ring_allreduce.ring_device(ctx("gloo", "cpu")) == torch.device("cpu")
    assert ring_allreduce.ring_device(ctx("nccl", "cuda:1")) == torch.device("cuda:1")
