"""The doctor's reference run: one process on the N ranks' samples (``doctor/reference``).

The forward in the ranks' chunks is checked against DDP's own gradients on real gloo ranks; the
replay's cutting and joining, the printed-number matching and the float allowance on their
own; the allowance on whole doctor runs: a clean script over 50 steps stays well inside it, a
learning rate 1 % off on one rank leaves it at the first step.
"""

from __future__ import annotations

import collections
import math
import textwrap

import pytest
import torch
import torch.nn as nn

import ddplab
import rank_fns
from ddplab.doctor.launch.diagnose import diagnose
from ddplab.doctor.ranks import chunked, replay
from ddplab.doctor.reference import collate, compare, printed


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


def _grads(model, forward, x, y):
    model.zero_grad()
    nn.functional.cross_entropy(forward(x), y).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def test_the_forward_in_chunks_gives_ddps_gradients_and_buffers():
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 6, generator=g) * (1 + r), torch.randint(0, 2, (8,), generator=g))
               for r in range(2)]
    ranks = ddplab.run(rank_fns.bn_ddp_step, 2, batches=batches)
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    model = _model()
    mine = _grads(model, lambda v: chunked.forward_in_chunks(model, [8, 8], (v,), {}), x, y)
    for name, grad in ranks[0]["grads"].items():
        assert torch.allclose(mine[name], torch.as_tensor(grad), atol=1e-6), name
    for name, buffer in ranks[0]["buffers"].items():  # rank 0's, as DDP broadcasts them
        mine_b = dict(model.named_buffers())[name]
        assert torch.allclose(mine_b.float(), torch.as_tensor(buffer).float(), atol=1e-6), (
            name, mine_b, buffer)
    whole = _model()
    at_once = _grads(whole, whole, x, y)  # one BatchNorm over both ranks' samples
    assert max(float((at_once[n] - torch.as_tensor(g)).abs().max())
               for n, g in ranks[0]["grads"].items()) > 1e-3


def test_sync_batchnorm_runs_whole_and_refuses_a_cpu_group():
    """SyncBatchNorm's statistics are over every rank's samples: its reference forward is one
    forward over the joined batch. torch 2.13 refuses it on CPU tensors whenever a group is
    initialised (``nn/modules/batchnorm.py``: 'SyncBatchNorm expected input tensor to be on
    GPU'), so on gloo CPU ranks the N-rank run crashes (``known-crash``) and no reference run
    is made."""
    model = nn.Sequential(nn.Linear(6, 8), nn.SyncBatchNorm(8))
    assert chunked.has_sync_batchnorm(model) and not chunked.has_sync_batchnorm(_model())
    source = open(nn.modules.batchnorm.__file__).read()
    assert "SyncBatchNorm expected input tensor to be on GPU" in source


def test_a_divided_global_batch_gets_the_ranks_batches_joined():
    step = [{"loader": 0, "pass": 0, "batch": (torch.full((4, 1), 10.0 * r + j),)}
            for j in range(2) for r in range(2)]  # micro-step j of rank r, interleaved
    items, note = replay.items_for_step(1, step, 2, 2)
    assert note is None and [i.chunks for i in items] == [[4, 4], [4, 4]]
    assert items[0].batch[0][:, 0].tolist() == [0.0] * 4 + [10.0] * 4
    items, _ = replay.items_for_step(1, step, 4, 2)  # nanoGPT: N times more micro-steps
    assert [i.chunks for i in items] == [[4]] * 4
    items, _ = replay.items_for_step(1, step, 3, 2)  # cut across the ranks' batches
    assert [sum(i.chunks) for i in items] == [5, 6, 5]


def test_batches_are_cut_and_joined_as_collated():
    pair = collections.namedtuple("Pair", "x y")
    a = {"ids": torch.arange(4), "pair": pair(torch.zeros(4, 2), torch.ones(4)), "name": "a"}
    b = {"ids": torch.arange(4, 8), "pair": pair(torch.zeros(4, 2), torch.ones(4)), "name": "b"}
    joined = collate.join([a, b])
    assert joined["ids"].tolist() == list(range(8)) and joined["name"] == "a"
    assert isinstance(joined["pair"], pair) and collate.size(joined) == 8
    assert collate.cut(joined, 2, 5, 8)["ids"].tolist() == [2, 3, 4]
    assert collate.size({"a": torch.zeros(3), "b": torch.zeros(4)}) is None  # ragged


def test_printed_numbers_match_to_their_last_digit_and_skip_clocks():
    assert printed.equal("0.67493", "0.67494") and not printed.equal("0.6749", "0.6751")
    assert [v for _, v in printed.numbers_of("iter 3: loss 2.5, time 31.2ms")] == [3.0, 2.5]
    assert printed.numbers_of("epoch took 31.2 (throughput 1234.5)") == []
    assert [v for _, v in printed.numbers_of("epoch 2 loss 0.5 took 3.2s")] == [2.0, 0.5]
    assert printed.ratio_words(0.5, 2).startswith("1/2")
    assert printed.ratio_words(2.0, 2).startswith("2: a sum over the 2 ranks")


def test_the_allowance_follows_size_steps_and_dtype():
    eps = torch.finfo(torch.float32).eps
    one = compare.allowed(1, 10_000, 16, 1.0, 0.0, eps)
    assert math.isclose(one, compare.C * eps * 100)  # sqrt(numel) times the path
    assert compare.allowed(4, 10_000, 16, 1.0, 0.0, eps) == 4 * one
    assert compare.allowed(1, 10_000, 16, 1.0, 0.0, torch.finfo(torch.bfloat16).eps) > 1e4 * one


LONG = """\
import sys
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
g = torch.Generator().manual_seed(0)
X = torch.randn(2400, 20, generator=g)
dataset = TensorDataset(X, (X[:, :3].sum(1) > 0).long())
sampler = DistributedSampler(dataset, seed=0)
loader = DataLoader(dataset, batch_size=24 // world_size, sampler=sampler)
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 2)))
off = float(sys.argv[1]) if rank == 1 else 1.0
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2 * off)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
"""


@pytest.fixture(scope="module")
def long_runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("long")
    script = folder / "long.py"
    script.write_text(textwrap.dedent(LONG))
    return {off: diagnose(str(script), [off], steps=50, batches=25, cwd=str(folder))
            for off in ("1.0", "1.01")}


def _verdict(diagnosis):
    return next(v for v in diagnosis.checks if v.id == "reference-differs")


def test_a_clean_script_agrees_over_50_steps(long_runs):
    verdict = _verdict(long_runs["1.0"])
    assert verdict.status == "passed", verdict.why
    assert "agree at every one of 50 steps" in verdict.why


def test_a_learning_rate_1_percent_off_on_one_rank_is_found_at_step_1(long_runs):
    diagnosis = long_runs["1.01"]
    f = next(f for f in diagnosis.findings if f.id == "reference-differs")
    assert f.evidence["step"] == 1 and f.evidence["rank"] == 1
    assert "rank 1 at 0.0101, rank 0 at 0.01" in f.message
    assert f.evidence["parameter_step"] == 1 and f.evidence["over"] > 10  # beyond float error
