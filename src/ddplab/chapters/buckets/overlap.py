"""Where does the time of a DDP step go? Backward computation against each bucket's all-reduce.

    python -m ddplab overlap --layers 64,1024,1024,10 --bucket-cap-mb 1000 --world-size 2
    torchrun --nproc-per-node 2 -m ddplab overlap --layers 64,1024,1024,10 --json

Every rank times whole training steps with :mod:`ddplab.common.timed_step` (the one timed step
the chapter "The time cost" uses too; seconds on one clock shared by the processes of a
machine), which records when autograd has accumulated each parameter's gradient, and records
when each all-reduce starts and ends:
``hooks.record_and_allreduce`` for DDP, ``hooks.NaiveAllReduce`` for naive data parallel.
Mode ``local`` communicates nothing: the computation alone. With ``record=False`` no hook at
all is installed (plain DDP), for step times without the recording's own small cost. The
step's edges and the gradients wait for a GPU (``clock.now``); the all-reduces' start and end
are host timestamps of their launch and of their future's completion.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common import bucket_rule, hooks, mlp, timed_step
from ddplab.common.checks import int_at_least, one_of, positive_int
from ddplab.common.results import Result

COMMAND = "overlap"  # python -m ddplab overlap

MODES = ("ddp", "naive", "local")


def steps(ctx, layers, mode: str, bucket_cap_mb, iterations: int, warmup: int,
          batch_size: int, seed: int, record: bool) -> list[dict]:
    """Time ``warmup + iterations`` training steps; return the last ``iterations``."""
    model = mlp.make_model(layers, seed).to(ctx.device)
    gradients = timed_step.GradientTimes(model, ctx.device, record)
    wrapped, log = model, None
    if mode == "naive":
        log = hooks.NaiveAllReduce(model, ctx.world_size)
    elif mode == "ddp":
        wrapped = DDP(model, bucket_cap_mb=bucket_cap_mb)
        if record:
            log = hooks.BucketLog(model, ctx.world_size)
            wrapped.register_comm_hook(log, hooks.record_and_allreduce)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    out = []
    for i in range(warmup + iterations):
        X, y = (t[rows].to(ctx.device)
                for t in mlp.make_batch(layers, batch_size, ctx.world_size, seed, i))
        stamps = timed_step.timed_step(wrapped, optimizer, X, y, gradients)
        if i >= warmup:  # iteration 0 has one bucket; DDP rebuilds them before iteration 1
            out.append({**stamps, "comm": _comm(log, mode)})
        if log is not None:
            (log.calls if mode == "naive" else log.buckets).clear()
    return out


def _comm(log, mode) -> list[dict]:
    """This iteration's all-reduces as (label, params, bytes, start, end)."""
    if log is None:
        return []
    if mode == "naive":
        return [{"label": c["param"], "params": [c["param"]], "bytes": c["bytes"],
                 "start": c["start"], "end": c["end"]} for c in log.calls]
    return [{"label": f"bucket {b['index']}", "params": b["params"], "bytes": b["bytes"],
             "start": b["launch"], "end": b["done"]} for b in log.buckets]


@dataclasses.dataclass
class Timeline(Result):
    """Measured training steps on every rank: seconds, except :meth:`events` (ms from the
    shown step's start, for the figures) and the JSON's ``*_ms`` fields."""

    layers: tuple
    world_size: int
    mode: str
    bucket_cap_mb: float | None
    param_names: list[str]
    param_bytes: list[int]
    ranks: list[list[dict]]  # per rank, per measured iteration (timed_step's clock, seconds)

    @property
    def phase_ranks(self) -> list[list[dict]]:
        """Per rank, per measured iteration: seconds of each phase of ``timed_step.phases``,
        ``step``, and ``after_last_gradient`` (backward's end minus the last gradient)."""
        return [[_phases(it, self.mode) for it in r] for r in self.ranks]

    @property
    def step_s(self) -> list[float]:
        """Per iteration, the step: the slowest rank's (``timed_step.slowest_steps``)."""
        return timed_step.slowest_steps(self.phase_ranks)

    @property
    def shown(self) -> int:
        """The iteration of the median step: the one the figures draw."""
        return timed_step.median_iteration(self.phase_ranks)

    def median(self, phase: str) -> float:
        """Seconds of ``phase`` (or ``step``) in the run's step, ``timed_step.median_step``:
        the slowest rank's at the median iteration. Phases: ``forward``, ``backward``
        (computing), ``waiting`` (after the last gradient, plus the time naive's blocking
        all-reduces held backward up), ``optimizer``; and ``after_last_gradient``."""
        return timed_step.median_step(self.phase_ranks)[phase]

    @property
    def step_ms(self) -> float:
        return 1e3 * self.median("step")

    def phases_ms(self) -> dict:
        """Ms of each phase of the run's step (they add up to ``step_ms``): the figure's bar."""
        return {p: 1e3 * self.median(p) for p in timed_step.PHASES}

    def events(self, rank: int) -> dict:
        """The shown iteration on ``rank`` in ms from the first rank's start of that step."""
        i = self.shown
        zero = min(r[i]["start"] for r in self.ranks)
        it = self.ranks[rank][i]
        ms = lambda t: 1e3 * (t - zero)  # noqa: E731
        return {"start": ms(it["start"]), "forward_end": ms(it["forward_end"]),
                "backward_end": ms(it["backward_end"]), "step_end": ms(it["step_end"]),
                "ready": [(name, ms(t)) for name, t in it["ready"]],
                "comm": [{**c, "start": ms(c["start"]), "end": ms(c["end"])}
                         for c in it["comm"]]}

    @property
    def started_during_backward(self) -> list[int]:
        """Per rank and measured iteration: how many all-reduces started before that rank's
        last gradient was ready, i.e. while backward was still computing."""
        return [sum(c["start"] < timed_step.last_gradient(it) for c in it["comm"])
                for r in self.ranks for it in r]

    @property
    def all_reduces(self) -> list[dict]:
        """The shown iteration's all-reduces on rank 0, in launch order."""
        return self.events(0)["comm"]

    def json_fields(self) -> dict:
        """The run's step and its phases in ms as ``step_time``'s JSON names them, every
        iteration's step, and every rank's shown iteration."""
        ms = {f"{p}_ms": 1e3 * self.median(p) for p in
              ("step", *timed_step.PHASES, "after_last_gradient")}
        return {"layers": list(self.layers), "world_size": self.world_size, "mode": self.mode,
                "bucket_cap_mb": self.bucket_cap_mb, **ms,
                "step_ms_per_iteration": [1e3 * t for t in self.step_s],
                "shown_iteration": [self.events(r) for r in range(self.world_size)]}

    def describe(self) -> str:
        setting = self.mode + ("" if self.mode != "ddp" else
                                 f", bucket_cap_mb={self.bucket_cap_mb}")
        lines = [f"MLP {','.join(map(str, self.layers))}, world size {self.world_size}, "
                 f"{setting}",
                 f"median step {1e3 * self.median('step'):.1f} ms: forward "
                 f"{1e3 * self.median('forward'):.1f}, backward computing "
                 f"{1e3 * self.median('backward'):.1f}, waiting for all-reduces "
                 f"{1e3 * self.median('waiting'):.1f}",
                 "all-reduces of rank 0 in the median step (ms from the step's start):"]
        lines += [f"  {c['label']:<10} {c['bytes']:>10,} bytes  "
                  f"{c['start']:7.2f} -> {c['end']:7.2f}"
                  for c in self.all_reduces]
        return "\n".join(lines)

    def describe_overlap(self) -> str:
        """All-reduces per step, and how many started while backward was still computing."""
        during, calls = self.started_during_backward, len(self.all_reduces)
        return (f"{calls:2d} all-reduce{'s' if calls != 1 else ' '} per step, "
                f"{min(during)} to {max(during)} of them started during backward")


def describe_phases(timelines: dict[str, Timeline]) -> str:
    """Ms of each run's step and its phases (see ``Timeline.median``), a row per run."""
    return timed_step.table(timelines)


def _phases(it: dict, mode: str) -> dict:
    """Seconds of each phase of one rank's iteration; naive's all-reduces block backward."""
    last = timed_step.last_gradient(it)
    blocked = (sum(c["end"] - c["start"] for c in it["comm"] if c["start"] < last)
               if mode == "naive" else 0.0)  # DDP's all-reduces run beside backward
    return {**timed_step.phases(it, blocked), "after_last_gradient": it["backward_end"] - last}


def run(world_size: int = 2, width: int = 1024, depth: int = 2,
        bucket_cap_mb: float | None = None, mode: str = "ddp", layers=None,
        iterations: int = 5, warmup: int = 2, batch_size: int = 32, seed: int = 0,
        record: bool = True, timeout: float = 60.0) -> Timeline:
    """Time DDP steps of an MLP ``64, width x depth, 10`` (or ``layers``) on ``world_size``."""
    for name, value in (("width", width), ("depth", depth), ("iterations", iterations),
                        ("batch_size", batch_size)):
        positive_int(name, value)
    int_at_least("warmup", warmup, 2, "DDP rebuilds its buckets after iteration 0")
    one_of("mode", mode, MODES)
    bucket_rule.check_cap(bucket_cap_mb)
    layers = mlp.check_layers((64, *[width] * depth, 10) if layers is None else layers)
    ranks = ddplab.run(steps, world_size, timeout=timeout, layers=layers,
                       mode=mode, bucket_cap_mb=bucket_cap_mb, iterations=iterations,
                       warmup=warmup, batch_size=batch_size, seed=seed, record=bool(record))
    # Names and sizes only: on the meta device, no memory and no initialisation (a real
    # 3-million-parameter model took 10 to 60 ms of a slider move on 2 shared cores).
    with torch.device("meta"):
        model = mlp.make_model(layers, seed)
    return Timeline.from_ranks(ranks, layers=layers, world_size=len(ranks), mode=mode,
                               bucket_cap_mb=bucket_cap_mb,
                               param_names=[n for n, _ in model.named_parameters()],
                               param_bytes=[4 * p.numel() for p in model.parameters()],
                               ranks=ranks)


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--layers", default="64,1024,1024,10",
                        help="widths of the MLP's Linear layers (default 64,1024,1024,10)")
    parser.add_argument("--bucket-cap-mb", type=float, default=None)
    parser.add_argument("--mode", choices=MODES, default="ddp")
    parser.add_argument("--iterations", type=int, default=5, help="timed steps after warmup")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank")
