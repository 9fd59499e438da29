"""Unused parameters: a parameter that gets no gradient leaves its bucket incomplete, and DDP
refuses to start the next iteration.

DDP's reducer all-reduces a bucket once every gradient in it is ready. A parameter outside the
forward's graph never becomes ready, the reduction never finishes, and the next forward raises
"Expected to have finished reduction in the prior iteration before starting a new one"
(``Reducer::ensure_prior_reduction_finished``, ``torch/csrc/distributed/c10d/reducer.cpp``).
``find_unused_parameters=True`` makes DDP walk the autograd graph from the outputs after every
forward and mark what it does not reach as ready; that walk, and the all-reduce of the
used-parameter map, cost time on every step, used parameters or not.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import signal
import socket
import subprocess
import sys
import textwrap

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.common import timed_step
from ddplab.common.checks import an_int, int_in_range, one_of, positive_int, positive_number
from ddplab.common.mlp import make_model
from ddplab.common.results import Result

FEATURES = 8


class WithAuxHead(torch.nn.Module):
    """A trunk and a head; ``aux`` is registered but only used when asked (a second task's
    head, a frozen branch): its parameters get no gradient in the default forward."""

    def __init__(self):
        super().__init__()
        self.trunk = torch.nn.Linear(FEATURES, 16)
        self.head = torch.nn.Linear(16, 1)
        self.aux = torch.nn.Linear(16, 1)

    def forward(self, X, use_aux: bool = False):
        h = torch.relu(self.trunk(X))
        return self.head(h) + (self.aux(h) if use_aux else 0)


# ---------------------------------------------------------------- on every rank


def two_steps(ctx, find_unused_parameters: bool, seed: int) -> dict:
    """Two training steps of ``WithAuxHead`` without its aux head; DDP's error, if any."""
    torch.manual_seed(seed)
    model = WithAuxHead().to(ctx.device)
    ddp = DDP(model, find_unused_parameters=find_unused_parameters)
    g = torch.Generator().manual_seed(seed + ctx.rank)
    done = 0
    try:
        for _ in range(2):
            X, y = torch.randn(8, FEATURES, generator=g), torch.randn(8, 1, generator=g)
            F.mse_loss(ddp(X.to(ctx.device)), y.to(ctx.device)).backward()
            done += 1
        error = None
    except RuntimeError as exc:
        error = str(exc)
    return {"steps_done": done, "error": error,
            "aux_grad_is_none": model.aux.weight.grad is None}


def step_times(ctx, layers, steps: int, batch_size: int, seed: int) -> dict:
    """Per flag, this rank's SGD steps of the same MLP under DDP with and without
    ``find_unused_parameters`` (``timed_step.timed``), alternating so that both see the same
    machine load."""
    models = {flag: make_model(layers, seed).to(ctx.device) for flag in (False, True)}
    ddps = {flag: DDP(model, find_unused_parameters=flag) for flag, model in models.items()}
    optimizers = {flag: torch.optim.SGD(model.parameters(), lr=1e-3)
                  for flag, model in models.items()}
    g = torch.Generator().manual_seed(seed + ctx.rank)
    X = torch.randn(batch_size, layers[0], generator=g).to(ctx.device)
    y = torch.randn(batch_size, layers[-1], generator=g).to(ctx.device)

    def step(flag):
        optimizers[flag].zero_grad()
        F.mse_loss(ddps[flag](X), y).backward()
        optimizers[flag].step()

    times = {False: [], True: []}
    for i in range(steps + 2):  # the first two steps build and rebuild the buckets
        for flag in ddps:
            record = timed_step.timed(step, ctx.device, flag)
            if i >= 2:
                times[flag].append(record)
    return {"without": times[False], "with": times[True]}


def error_and_step_times(ctx, layers, steps: int, batch_size: int, seed: int) -> dict:
    """DDP's error without the flag, two steps with it, then the step times: one call to the
    ranks rather than three (each call is a round trip to every rank, about 10-40 ms on a
    busy 2-core machine, a slider move's budget)."""
    return {"unflagged": two_steps(ctx, find_unused_parameters=False, seed=seed),
            "flagged": two_steps(ctx, find_unused_parameters=True, seed=seed),
            **step_times(ctx, layers, steps, batch_size, seed)}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class UnusedParameters(Result):
    world_size: int
    error: str | None  # DDP's error without find_unused_parameters, as rank 0 saw it
    steps_done: int  # steps completed before it
    steps_done_with_flag: int  # with find_unused_parameters=True
    aux_grad_is_none: bool  # the unused head's gradient with the flag (None: never touched)
    layers: tuple  # the MLP the step time is measured on
    ms_without: list[float]  # per step, ms (the slowest rank's), find_unused_parameters=False
    ms_with: list[float]  # ... True

    json_extras = ("median_ms_without", "median_ms_with")

    @property
    def median_ms_without(self) -> float:
        return timed_step.middle(self.ms_without)

    @property
    def median_ms_with(self) -> float:
        return timed_step.middle(self.ms_with)

    def describe(self) -> str:
        first = (self.error or "none").split(". ")[0]
        return "\n".join(textwrap.fill(line, 78, subsequent_indent="  ") for line in [
            f"without find_unused_parameters: {self.steps_done} step(s), then: {first}.",
            f"with find_unused_parameters=True: {self.steps_done_with_flag} steps; the unused "
            f"head's gradient is {'None' if self.aux_grad_is_none else 'a tensor'}",
            f"MLP {','.join(map(str, self.layers))}, median SGD step (the slowest rank's): "
            f"{self.median_ms_without:.2f} ms without the flag, {self.median_ms_with:.2f} ms "
            f"with it ({len(self.ms_with)} steps each, alternating)"])


def run(world_size: int = 2, layers=(32,) * 13, steps: int = 30, batch_size: int = 8,
        seed: int = 0, timeout: float = 60.0) -> UnusedParameters:
    int_in_range("world_size", world_size, 1, ddplab.MAX_WORLD_SIZE)
    positive_int("steps", steps)
    positive_int("batch_size", batch_size)
    an_int("seed", seed)
    layers = tuple(layers)
    ranks = ddplab.run(error_and_step_times, world_size, timeout=timeout,
                       layers=layers, steps=steps, batch_size=batch_size, seed=seed)
    without, flagged = ranks[0]["unflagged"], ranks[0]["flagged"]  # as rank 0 saw them
    ms = {key: [1e3 * s for s in timed_step.slowest_steps([r[key] for r in ranks])]
          for key in ("without", "with")}
    return UnusedParameters.from_ranks(
        ranks,
        world_size=world_size, error=without["error"], steps_done=without["steps_done"],
        steps_done_with_flag=flagged["steps_done"],
        aux_grad_is_none=flagged["aux_grad_is_none"], layers=layers,
        ms_without=ms["without"], ms_with=ms["with"])


# The reader's script, cut to what makes the error: a model with a head the loss never uses.
_SCRIPT = """
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddplab.chapters.hangs.unused_parameters import FEATURES, WithAuxHead

dist.init_process_group("gloo")
torch.manual_seed(0)
ddp = DDP(WithAuxHead())
for _ in range(2):
    X, y = torch.randn(8, FEATURES), torch.randn(8, 1)
    F.mse_loss(ddp(X), y).backward()
"""


def under_debug_level(level: str = "INFO", world_size: int = 2,
                      timeout: float = 120.0) -> list[subprocess.CompletedProcess]:
    """The script above on ``world_size`` fresh interpreters started as torchrun starts them,
    with ``TORCH_DISTRIBUTED_DEBUG=level`` in their environment before they start (torch reads
    it once, when ``torch.distributed`` is imported: ``set_debug_level_from_env()`` in
    ``torch/distributed/__init__.py``); each rank's exit code and stderr, by rank. With DETAIL
    on gloo, torch 2.13 dies in DDP's constructor (SIGSEGV; ``hangs.md``, "What
    TORCH_DISTRIBUTED_DEBUG=DETAIL catches"). Their store is served here, on a socket bound to
    127.0.0.1, and the ranks connect to it as torchrun's do (``TORCHELASTIC_USE_AGENT_STORE``,
    ``_create_c10d_store`` in ``torch/distributed/rendezvous.py``)."""
    one_of("level", level, ("OFF", "INFO", "DETAIL"))
    int_in_range("world_size", world_size, 1, ddplab.MAX_WORLD_SIZE)
    positive_number("timeout", timeout)
    listen = socket.socket()
    try:
        listen.bind(("127.0.0.1", 0))
        listen.listen()
        port = listen.getsockname()[1]
        # The store takes the socket over and closes it itself when it is destroyed.
        store = dist.TCPStore("127.0.0.1", port, world_size, True, wait_for_workers=False,
                              master_listen_fd=listen.fileno(),
                              timeout=datetime.timedelta(seconds=timeout))
        listen.detach()
    finally:
        listen.close()
    procs = [subprocess.Popen(
        [sys.executable, "-c", _SCRIPT], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
        env={**os.environ, "TORCH_DISTRIBUTED_DEBUG": level, "GLOO_SOCKET_IFNAME": "lo",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
             "TORCHELASTIC_USE_AGENT_STORE": "True", "RANK": str(rank),
             "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
             "LOCAL_WORLD_SIZE": str(world_size)})
        for rank in range(world_size)]
    done = []
    for proc in procs:
        try:
            err = proc.communicate(timeout=timeout)[1]
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            err = proc.communicate()[1] + f"\n(killed after {timeout} s)"
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, None, err))
    del store
    return done


def lines_holding(stderr: str, phrase: str) -> list[str]:
    """The lines of ``stderr`` that hold ``phrase``, as the terminal shows them."""
    return [line for line in stderr.splitlines() if phrase in line]
