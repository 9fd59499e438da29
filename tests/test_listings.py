"""Every listing a page offers for copying runs as pasted, from the page's own text.

A listing is offered for copying when its directive has the class ``to-copy`` (see
``tests/listings.py``, which reads it as the page shows it). Each has a run below: a driver
that calls it on real gloo ranks in fresh interpreters (one pair per page and world size,
each listing a module of its own), with nothing but the page's text
imported first (``L``), and checks what it did; a whole script runs under torchrun. A listing
offered for copying without a run here, or a run whose listing is gone, fails
``test_every_listing_offered_for_copying_has_a_run``.
"""

from __future__ import annotations

import dataclasses

import pytest

import listings


@dataclasses.dataclass(frozen=True)
class Run:
    page: str
    names: tuple[str, ...]  # the listings it runs, together, in this order
    driver: str  # Python run after the listing's module is imported as L
    world_size: int = 2
    needs: tuple[str, ...] = ()  # other listings of the page the text needs, put before it

    @property
    def id(self) -> str:
        return f"{self.page}:{'+'.join(self.names)}"


# Save after a step, take one more; a model from another seed, loaded, takes the same step:
# the same parameters only if the model and the optimizer's state came back (Adam).
ROUND_TRIP = """
        def step(model, optimizer, X, y):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(X), y).backward()
            optimizer.step()
            return torch.cat([(p.full_tensor() if hasattr(p, "full_tensor") else p).flatten()
                              for p in model.parameters()]).detach()

        torch.manual_seed(1 + rank)
        X, y = torch.randn(4, 8), torch.randn(4, 1)
        model, optimizer = trained(0)
        step(model, optimizer, X, y)
        {save}
        went_on = step(model, optimizer, X, y)
        model, optimizer = trained(2)
        {load}
        assert torch.equal(step(model, optimizer, X, y), went_on)
"""

SCRIPTS = {"averaging:main": 5}  # a whole script, and the lines "epoch N: ..." it prints

RUNS = [
    Run("errors", ("all_reduce_mean",), """
        assert L.all_reduce_mean(float(rank), device) == 0.5
    """),
    Run("sharding", ("sharded_loader",), """
        data = torch.utils.data.TensorDataset(torch.arange(10))
        loader = L.sharded_loader(data, batch_size=2, seed=0)
        loader.sampler.set_epoch(1)
        mine = torch.cat([batch for (batch,) in loader])
        every = [torch.zeros_like(mine) for _ in range(world_size)]
        dist.all_gather(every, mine)
        assert sorted(torch.cat(every).tolist()) == list(range(10))
    """),
    Run("lr_scaling", ("scaled_lr_with_warmup",), """
        weight = torch.zeros(1, requires_grad=True)
        optimizer = torch.optim.SGD([weight], lr=0.1 * 4)  # the linear rule at 4 ranks
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
        scheduler = L.scaled_lr_with_warmup(optimizer, 5, 4, cosine)
        rates = []
        for _ in range(15):
            rates.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        assert all(abs(rates[t] - (0.1 + 0.3 * t / 5)) < 1e-12 for t in range(6)), rates
        assert rates[6] < rates[5] and rates[14] < 0.01, rates
    """, world_size=1),
    Run("hangs", ("train_epoch_equal_count",), """
        torch.manual_seed(0)
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        loader = [(torch.randn(2, 4), torch.randn(2, 1)) for _ in range(3 - rank)]  # uneven
        L.train_epoch_equal_count(ddp, optimizer, loader)  # would hang without the count
        weights = [torch.zeros(4) for _ in range(world_size)]
        dist.all_gather(weights, ddp.module.weight.detach().flatten())
        assert torch.equal(weights[0], weights[1])
    """, needs=("train_epoch",)),
    Run("hangs", ("train_epoch_mean_after_join",), """
        torch.manual_seed(0)
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        loader = [(torch.randn(2, 4), torch.randn(2, 1)) for _ in range(3 - rank)]  # uneven
        logged = []
        L.train_epoch_mean_after_join(ddp, optimizer, loader, log=logged.append)
        every = [None] * world_size
        dist.all_gather_object(every, logged)
        assert every[0] == every[1] and len(logged) == 1
    """),
    Run("hangs", ("save_checkpoint",), """
        torch.manual_seed(rank)  # different on each rank: the file is rank 0's
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        L.save_checkpoint(ddp, "checkpoint.pt", rank)
        state = torch.load("checkpoint.pt")
        assert sorted(state) == ["bias", "weight"]  # the module's keys, no "module."
        assert torch.equal(state["weight"], ddp.module.weight)  # DDP broadcast rank 0's
    """),
    Run("hangs", ("load_checkpoint",), """
        torch.save(torch.nn.Linear(4, 1).state_dict(), "checkpoint.pt")
        model = torch.nn.Linear(4, 1)
        L.load_checkpoint(model, "checkpoint.pt", device)
        assert torch.equal(model.weight, torch.load("checkpoint.pt")["weight"])
    """, world_size=1),
    # an error in rank 0's block, as a timeout raises one: both ranks dump, rank 1 from its
    # thread while its main thread goes on, and rank 0 re-raises once both have
    Run("hangs", ("flight_record_on_error",), """
        import pickle
        os.makedirs("fr", exist_ok=True)
        raised = None
        try:
            with L.flight_record_on_error("fr"):
                dist.all_reduce(torch.ones(3))
                if rank == 0:
                    raise RuntimeError("Timed out waiting 2000ms for recv operation")
        except RuntimeError as exc:
            raised = str(exc)
        assert (raised is not None) == (rank == 0)
        dist.barrier()
        for r in range(world_size):
            with open(f"fr/fr_trace_{r}", "rb") as f:
                entries = pickle.load(f)["entries"]
            assert any(e["profiling_name"] == "gloo:all_reduce" and e["input_sizes"] == [[3]]
                       for e in entries), entries[-3:]
    """),
    Run("memory", ("zero1_optimizer",), """
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        optimizer = L.zero1_optimizer(model, torch.optim.Adam, lr=1e-2)
        torch.nn.functional.mse_loss(ddp(torch.randn(4, 8)), torch.randn(4, 8)).backward()
        optimizer.step()
        mine = len(optimizer.optim.state)  # the parameters whose Adam state this rank keeps
        counts = [None] * world_size
        dist.all_gather_object(counts, mine)
        assert sum(counts) == 4 and 0 < mine < 4, counts
    """),
    Run("memory", ("shard_with_fsdp",), """
        import copy
        torch.manual_seed(0)
        model = L.BlockModel(8, 2)
        one_process = copy.deepcopy(model)
        L.shard_with_fsdp(model, model.blocks, "cpu")
        weight = model.blocks[0].mlp[0].weight
        assert weight.to_local().shape[0] == weight.shape[0] // world_size  # a shard of rows
        X, y = torch.randn(4 * world_size, 8), torch.randn(4 * world_size, 1)
        rows = slice(4 * rank, 4 * (rank + 1))
        for m, Xm, ym in ((model, X[rows], y[rows]), (one_process, X, y)):
            optimizer = torch.optim.SGD(m.parameters(), lr=0.1)
            torch.nn.functional.mse_loss(m(Xm), ym).backward()
            optimizer.step()
        for p, q in zip(model.parameters(), one_process.parameters()):
            assert (p.full_tensor() - q).abs().max() < 1e-6
    """, needs=("Block", "BlockModel")),
    Run("memory", ("save_sharded", "load_sharded"), """
        def trained(seed):
            torch.manual_seed(seed)
            model = L.BlockModel(8, 2)
            L.shard_with_fsdp(model, model.blocks, "cpu")
            return model, torch.optim.Adam(model.parameters(), lr=1e-2)
    """ + ROUND_TRIP.format(save='L.save_sharded(model, optimizer, "checkpoint")',
                            load='L.load_sharded(model, optimizer, "checkpoint")'),
        needs=("Block", "BlockModel", "shard_with_fsdp")),
    Run("memory", ("save_zero1", "load_zero1"), """
        def trained(seed):
            torch.manual_seed(seed)
            model = torch.nn.parallel.DistributedDataParallel(L.BlockModel(8, 2))
            return model, L.zero1_optimizer(model.module, torch.optim.Adam, lr=1e-2)
    """ + ROUND_TRIP.format(save='L.save_zero1(model, optimizer, "checkpoint.pt")',
                            load='L.load_zero1(model, optimizer, "checkpoint.pt", device)'),
        needs=("Block", "BlockModel", "zero1_optimizer")),
    Run("memory", ("activation_bytes",), """
        import ctypes

        class Mallinfo2(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                "uordblks", "fordblks", "keepcost")]

        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = Mallinfo2

        def in_use(device):  # glibc's count on a CPU, in place of CUDA's allocator
            info = libc.mallinfo2()
            return info.uordblks + info.hblkhd

        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                    torch.nn.Linear(256, 64))
        X, y = torch.randn(512, 64), torch.randn(512, 64)
        L.activation_bytes(model, X, y, in_use)  # torch's own lazy state, first
        kept = L.activation_bytes(model, X, y, in_use)
        assert kept >= 512 * (64 + 256 + 256) * 4, kept  # the inputs each layer keeps
    """, world_size=1),
    Run("memory", ("checkpointed_forward",), """
        torch.manual_seed(0)
        model = torch.nn.Sequential(*(torch.nn.Linear(8, 8) for _ in range(4)))
        X = torch.randn(4, 8)
        L.checkpointed_forward(model, X, 2).sum().backward()
        checkpointed = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(X).sum().backward()
        assert all(torch.equal(a, p.grad) for a, p in zip(checkpointed, model.parameters()))
    """, world_size=1),
    Run("memory", ("autocast_forward",), """
        assert L.autocast_forward(torch.nn.Linear(8, 8), torch.randn(4, 8)).dtype == \\
            torch.bfloat16
    """, world_size=1),
    Run("time_cost", ("accumulate",), """
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        X, y = torch.randn(8 * world_size, 4), torch.randn(8 * world_size, 1)
        torch.nn.functional.mse_loss(model(X), y).backward()
        one_process = model.weight.grad.clone()
        model.zero_grad()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        mine = X[8 * rank:8 * (rank + 1)], y[8 * rank:8 * (rank + 1)]
        L.accumulate(ddp, [(mine[0][:4], mine[1][:4]), (mine[0][4:], mine[1][4:])])
        assert (model.weight.grad - one_process).abs().max() < 1e-6
    """),
    Run("training_loop", ("gather_unequal",), """
        every = L.gather_unequal(torch.arange(rank + 2, dtype=torch.float32))
        assert every.tolist() == [0.0, 1.0, 0.0, 1.0, 2.0]
    """),
    Run("training_loop", ("gather_in_sampler_order",), """
        from torch.utils.data import DistributedSampler
        mine = torch.tensor(list(DistributedSampler(range(7), shuffle=True, seed=3)))
        every = L.gather_in_sampler_order(mine.to(device) * 10, 7)
        g = torch.Generator()
        g.manual_seed(3)  # the sampler's own order: seed + epoch (0)
        assert every.tolist() == (torch.randperm(7, generator=g) * 10).tolist(), every
    """),
    Run("training_loop", ("clipped_step",), """
        torch.manual_seed(0)
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        torch.manual_seed(1 + rank)
        torch.nn.functional.mse_loss(ddp(torch.randn(4, 4)), torch.randn(4, 1)).backward()
        norm = L.clipped_step(ddp, optimizer, 0.01)
        norms = [None] * world_size
        dist.all_gather_object(norms, norm)
        assert norms[0] == norms[1] > 0.01  # the averaged gradient's norm, the same on both
    """),
    Run("training_loop", ("scaled_clipped_step",), """
        torch.manual_seed(0)
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)  # fp16 overflows less
        torch.manual_seed(1 + rank)
        norm = L.scaled_clipped_step(ddp, optimizer, scaler, torch.randn(4, 4),
                                     torch.randn(4, 1), 0.5)
        assert 0 < norm < 100, norm  # the unscaled norm, not the scale (1024) times it
    """),
    Run("training_loop", ("scaled_step",), """
        torch.manual_seed(0)
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        # fp16: at the default scale (65536) this batch's scaled gradient overflows and the
        # step is skipped, as it should be; a smaller scale takes it
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
        before = ddp.module.weight.detach().clone()
        L.scaled_step(ddp, optimizer, scaler, torch.randn(4, 4), torch.randn(4, 1))
        assert not torch.equal(before, ddp.module.weight)
        assert scaler.get_scale() == 2.0 ** 10  # not halved: no inf, the step was taken
    """),
    Run("training_loop", ("should_stop",), """
        loss = torch.tensor(float("inf") if rank == 1 else 1.0)
        assert L.should_stop(loss) is True  # on every rank, though one saw the inf
        assert L.should_stop(torch.tensor(1.0)) is False
    """),
    Run("training_loop", ("seed_everything",), """
        import random
        L.seed_everything(3, rank)
        mine = (torch.rand(1).item(), random.random())
        L.seed_everything(3, rank)
        assert mine == (torch.rand(1).item(), random.random())
        every = [None] * world_size
        dist.all_gather_object(every, mine)
        assert every[0] != every[1]  # each rank draws its own
    """),
    Run("training_loop", ("print_global_loss",), """
        L.print_global_loss(7, torch.tensor(float(rank + 1)))  # ranks' losses 1 and 2
    """),
]
PRINTED = {"training_loop:print_global_loss": "step 7: loss 1.500000"}  # rank 0 only

PAGES = {listing.key: listing for listing in listings.collect()}


def _text(run: Run) -> str:
    """The page's text of the run's listings, those it needs first."""
    shown = {listing.name: listing for listing in listings.read_page(
        listings.BOOK / f"{run.page}.md")}
    missing = [n for n in run.needs + run.names if n not in shown]
    assert not missing, f"book/{run.page}.md shows no listing {missing}"
    return "\n\n".join(shown[n].text for n in run.needs + run.names)


def test_every_listing_offered_for_copying_has_a_run():
    covered = {f"{r.page}:{name}" for r in RUNS for name in r.names} | set(SCRIPTS)
    assert sorted(set(PAGES) - covered) == [], "listings offered for copying without a run"
    assert sorted(covered - set(PAGES)) == [], "runs of listings no page offers for copying"
    assert all(PAGES[key].whole_script for key in SCRIPTS)
    assert not any(PAGES[f"{r.page}:{n}"].whole_script for r in RUNS for n in r.names)


GROUPS = {}  # (page, world size) -> its runs: one pair of fresh interpreters per group
for _run in RUNS:
    GROUPS.setdefault((_run.page, _run.world_size), []).append(_run)


@pytest.mark.parametrize("group", list(GROUPS), ids=[f"{p}-{w}" for p, w in GROUPS])
def test_listings_run_as_pasted(group, tmp_path):
    runs = GROUPS[group]
    done = listings.run_functions([(r.id, _text(r), r.driver) for r in runs], tmp_path,
                                  world_size=group[1])
    for rank, proc in enumerate(done):
        ran = [r.id for r in runs if f"rank {rank}: {r.id} ran" in proc.stdout]
        assert proc.returncode == 0, (f"rank {rank}, after {ran or 'none'} ran:\n"
                                      f"{proc.stderr[-3000:]}")
        assert ran == [r.id for r in runs] and f"rank {rank}: the listing ran" in proc.stdout
    for run in runs:
        if run.id in PRINTED:
            assert PRINTED[run.id] in done[0].stdout and PRINTED[run.id] not in done[1].stdout


@pytest.mark.parametrize("key", sorted(SCRIPTS))
def test_whole_script_runs_under_torchrun(key, tmp_path):
    done = listings.run_script(PAGES[key].text, tmp_path, world_size=2)
    assert done.returncode == 0, done.stderr[-3000:]
    epochs = [line for line in done.stdout.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == SCRIPTS[key], done.stdout
    assert float(epochs[-1].rsplit(" ", 1)[1]) < 0.02  # it trained


def test_a_name_the_text_never_defines_fails(tmp_path):
    """The check can fail: a listing that calls a helper the text does not define (as
    ``scaled_clipped_step`` once called ``fp16_loss``) fails in its fresh interpreter."""
    code = "def step(x):\n    return helper(x) + 1\n"
    done = listings.run_function(code, "L.step(1)\n", tmp_path, world_size=1)
    assert done[0].returncode != 0 and "NameError: name 'helper'" in done[0].stderr


def test_listings_of_one_page_share_no_names(tmp_path):
    """Run together, each listing is still a module of its own: a helper the first one
    defines is no name of the second's, which fails as it would alone; the first still ran."""
    runs = [("first", "def helper(x):\n    return x\n", "assert L.helper(1) == 1\n"),
            ("second", "def step(x):\n    return helper(x) + 1\n", "L.step(1)\n")]
    done = listings.run_functions(runs, tmp_path, world_size=1)
    assert done[0].returncode != 0 and "NameError: name 'helper'" in done[0].stderr
    assert "rank 0: first ran" in done[0].stdout and "second ran" not in done[0].stdout


def test_the_reader_sees_the_listing_as_the_page_shows_it(tmp_path):
    """The options of a literalinclude reach the text: a pyobject, imports prepended from a
    YAML block, the class; a plain fence is not a listing."""
    (tmp_path / "mod.py").write_text("import os\n\n\ndef f(x):\n    return g(x)\n\n\n"
                                     "def g(x):\n    return x\n")
    (tmp_path / "page.md").write_text(
        "```{literalinclude} mod.py\n---\npyobject: f\nclass: to-copy\nprepend: |\n"
        "  import torch\n\n---\n```\n\n```{literalinclude} mod.py\n:pyobject: g\n```\n\n"
        "```python\nx = 1\n```\n")
    first, second = listings.read_page(tmp_path / "page.md")
    assert first.text == "import torch\n\ndef f(x):\n    return g(x)\n"
    assert first.for_copying and not first.whole_script and first.name == "f"
    assert second.text == "def g(x):\n    return x\n" and not second.for_copying
    assert listings.collect(tmp_path) == [first]


@pytest.mark.parametrize("page, line, code", listings.fragments(),
                         ids=[f"{p}:{n}" for p, n, _ in listings.fragments()])
def test_every_python_fragment_compiles(page, line, code):
    """A fenced ```python block is a fragment to edit into a script (``...`` for the rest of
    it), not a listing to run whole; it must still be Python."""
    compile(code, f"book/{page}.md:{line}", "exec")
