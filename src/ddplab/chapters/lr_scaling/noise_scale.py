"""The gradient noise scale, measured by DDP itself while it trains.

    python -m ddplab noise-scale --world-size 8 --batch-size 4 --lr 0.2 --steps 40 --json
    torchrun --nproc-per-node 8 -m ddplab noise-scale --batch-size 4 --lr 0.2 --json

During every backward, each rank holds its own gradient of its batch_size samples (a small
batch) until DDP all-reduces it into the gradient of all world_size x batch_size samples (a big
batch). A communication hook records the squared norm of both, for free. McCandlish et al. 2018
(appendix A.1) turn those two norms into unbiased estimates of |G|^2, the squared norm of the
true gradient, and of tr(Sigma), the summed variance of one sample's gradient; their ratio is
the simple noise scale B_simple = tr(Sigma) / |G|^2 (section 2.2). The task is that of
``lr_scaling`` (plain SGD, constant learning rate).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ddplab
from ddplab.chapters.lr_scaling import lr_scaling as task
from ddplab.chapters.lr_scaling import regression
from ddplab.common.checks import int_at_least
from ddplab.common.results import Result

COMMAND = "noise-scale"  # python -m ddplab noise-scale

TARGET = regression.TARGET  # steps are counted to this expected loss


# ---------------------------------------------------------------- McCandlish et al., app. A.1


def g2_estimate(small_sq, big_sq, b_small: int, b_big: int):
    """Unbiased estimate of |G|^2 from |G_small|^2 and |G_big|^2 (McCandlish et al. A.1):
    (b_big |G_big|^2 - b_small |G_small|^2) / (b_big - b_small)."""
    return (b_big * np.asarray(big_sq) - b_small * np.asarray(small_sq)) / (b_big - b_small)


def trace_estimate(small_sq, big_sq, b_small: int, b_big: int):
    """Unbiased estimate of tr(Sigma) (McCandlish et al. A.1):
    (|G_small|^2 - |G_big|^2) / (1 / b_small - 1 / b_big)."""
    return (np.asarray(small_sq) - np.asarray(big_sq)) / (1 / b_small - 1 / b_big)


def exact(model) -> tuple[float, float]:
    """|G|^2 and tr(Sigma) of one sample's gradient at the model's parameters, exactly, for this
    task (x normal with covariance D = diag(scale^2), an input of 1 for the bias, label noise
    NOISE). With d = w - w*, e = b - b*, q = d'Dd and r = d'D^2 d, the gradient of one sample's
    squared error has mean G = 2 (Dd, e) and E|g|^2 = 4 ((tr D + 1)(q + e^2 + NOISE^2) + 2r)
    (Isserlis' theorem), so |G|^2 = 4 (r + e^2) and tr(Sigma) = E|g|^2 - |G|^2."""
    w, b = regression.teacher()
    D = regression.feature_scales() ** 2
    with torch.no_grad():
        d = model.weight.detach().cpu().flatten().double() - w.double()
        e = float(model.bias.detach().cpu()) - b
    q, r, trD = float((D * d * d).sum()), float((D * D * d * d).sum()), float(D.sum())
    g2 = 4 * (r + e * e)
    return g2, 4 * ((trD + 1) * (q + e * e + regression.NOISE ** 2) + 2 * r) - g2


# No annotations on a hook: DDP compares them with the expected types as
# objects, and this module's are strings (from __future__ import annotations).
def record_norms(state: dict, bucket):
    """A DDP communication hook: DDP's own average, recording the
    squared norms of this rank's gradient and of the average.

    The bucket arrives holding this rank's gradient (a hook's bucket is
    not divided by the world size beforehand) and leaves holding the
    average over all ranks, as without the hook.
    """
    local = bucket.buffer()
    state["small_sq"] += float(local.pow(2).sum())

    def average(fut):
        summed = fut.value()[0]
        summed.div_(state["world_size"])
        state["big_sq"] += float(summed.pow(2).sum())
        return summed

    future = dist.all_reduce(local, async_op=True).get_future()
    return future.then(average)


# ---------------------------------------------------------------- on every rank


def measure(ctx, batch_size: int, lr: float, steps: int, seed: int) -> dict:
    """Train with DDP; record, every step, both squared gradient norms and the expected loss."""
    rows = slice(ctx.rank * batch_size, (ctx.rank + 1) * batch_size)
    model = regression.make_regression_model().to(ctx.device)
    ddp = DDP(model)
    state = {"world_size": ctx.world_size, "small_sq": 0.0, "big_sq": 0.0}
    ddp.register_comm_hook(state, record_norms)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    small, big, population, truth = [], [], [], []
    for t in range(steps):
        X, y = regression.global_batch(seed, t, ctx.world_size * batch_size)
        population.append(regression.population_loss(model))  # the model the gradient is taken at
        truth.append(exact(model))
        state["small_sq"] = state["big_sq"] = 0.0  # summed over buckets within one step
        opt.zero_grad()
        F.mse_loss(ddp(X[rows].to(ctx.device)), y[rows].to(ctx.device)).backward()
        small.append(state["small_sq"])
        big.append(state["big_sq"])
        opt.step()
    return {"small_sq": small, "big_sq": big, "population_losses": population,
            "exact": truth}


# ---------------------------------------------------------------- in the caller


@dataclasses.dataclass
class NoiseScale(Result):
    """Per-step squared gradient norms from DDP, and the noise scale estimated from them."""

    world_size: int
    batch_size: int
    lr: float
    steps: int
    seed: int
    small_sq: np.ndarray  # (world_size, steps): |local gradient|^2, batch_size samples
    big_sq: np.ndarray  # (steps,): |DDP's gradient|^2, world_size * batch_size samples
    population_losses: np.ndarray  # (steps,): expected loss where each gradient was taken
    exact_g2: np.ndarray  # (steps,): the true |G|^2 there (see ``exact``)
    exact_trace: np.ndarray  # (steps,): the true tr(Sigma) there
    target: float | None = None  # estimate over the steps before this loss is reached

    @property
    def b_small(self) -> int:
        return self.batch_size

    @property
    def b_big(self) -> int:
        return self.world_size * self.batch_size

    @property
    def g2(self) -> np.ndarray:
        """Per step: unbiased |G|^2, from every rank's small batch (averaged) and the big one."""
        return g2_estimate(self.small_sq.mean(0), self.big_sq, self.b_small, self.b_big)

    @property
    def trace(self) -> np.ndarray:
        return trace_estimate(self.small_sq.mean(0), self.big_sq, self.b_small, self.b_big)

    @property
    def noise_floor(self) -> float:
        """The lowest expected loss any model reaches (the label noise's variance)."""
        return regression.NOISE ** 2

    @property
    def window(self) -> slice:
        """The steps the estimate averages: up to the one that first reaches ``target``."""
        if self.target is None:
            return slice(0, self.steps)
        below = np.flatnonzero(self.population_losses <= self.target)
        return slice(0, int(below[0]) + 1 if below.size else self.steps)

    @property
    def b_simple(self) -> float:
        """tr(Sigma) / |G|^2, each averaged over the window first (a ratio of averages, not an
        average of noisy per-step ratios)."""
        return float(self.trace[self.window].mean() / self.g2[self.window].mean())

    @property
    def b_simple_exact(self) -> float:
        """The same ratio of averages from the true values at the same steps."""
        w = self.window
        return float(self.exact_trace[w].mean() / self.exact_g2[w].mean())

    def json_fields(self) -> dict:
        w = self.window
        return {"world_size": self.world_size, "batch_size": self.batch_size,
                "b_small": self.b_small, "b_big": self.b_big, "lr": self.lr,
                "steps": self.steps, "seed": self.seed, "target": self.target,
                "window_steps": w.stop - w.start, "b_simple": self.b_simple,
                "g2": float(self.g2[w].mean()), "trace_sigma": float(self.trace[w].mean()),
                "b_simple_exact": self.b_simple_exact,
                "small_sq": self.small_sq, "big_sq": self.big_sq,
                "population_losses": self.population_losses}

    def describe(self) -> str:
        w = self.window
        return "\n".join([
            f"world size {self.world_size}: small batch {self.b_small} (one rank), big batch "
            f"{self.b_big} (DDP's average); steps {w.start}..{w.stop - 1} of {self.steps}",
            f"|G|^2 ~ {self.g2[w].mean():.4g}, tr(Sigma) ~ {self.trace[w].mean():.4g}, "
            f"B_simple = tr(Sigma) / |G|^2 ~ {self.b_simple:.1f} (exact over the same steps: "
            f"{self.b_simple_exact:.1f})"])


def run(world_size: int = 8, batch_size: int = 4, lr: float = 0.2, steps: int = 40,
        seed: int = 0, target: float | None = TARGET, timeout: float = 60.0) -> NoiseScale:
    """Train ``steps`` DDP steps and estimate B_simple over them (up to ``target``)."""
    task.check(batch_size=batch_size, lr=lr, steps=steps)
    int_at_least("world_size", world_size, 2, "a small and a big batch")
    results = ddplab.run(measure, world_size, timeout=timeout,
                         batch_size=batch_size, lr=lr, steps=steps, seed=seed)
    return NoiseScale.from_ranks(
        results,
        world_size=len(results), batch_size=batch_size, lr=lr, steps=steps, seed=seed,
        small_sq=np.array([r["small_sq"] for r in results]),
        big_sq=np.array(results[0]["big_sq"]),
        population_losses=np.array(results[0]["population_losses"]),
        exact_g2=np.array([g for g, _ in results[0]["exact"]]),
        exact_trace=np.array([t for _, t in results[0]["exact"]]), target=target)


def pooled(results, exact: bool = False) -> tuple[float, float, float]:
    """(|G|^2, tr(Sigma), B_simple) over the windows of several runs together: estimated by
    DDP, or (``exact=True``) the true values at the same steps."""
    g2 = np.concatenate([(r.exact_g2 if exact else r.g2)[r.window] for r in results]).mean()
    trace = np.concatenate([(r.exact_trace if exact else r.trace)[r.window]
                            for r in results]).mean()
    return float(g2), float(trace), float(trace / g2)


# ---------------------------------------------------------------- CLI


def add_arguments(parser) -> None:
    parser.add_argument("--batch-size", type=int, default=4, help="samples per rank")
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=TARGET,
                        help="average over the steps until the expected loss reaches this")
