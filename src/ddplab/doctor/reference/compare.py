"""The N ranks against the one process, step by step: every parameter of every rank after each
optimizer step, and each parameter group's learning rate.

How far apart two float runs may be. The two runs add the same numbers in a different order
(a rank's mean over its chunk, then DDP's average over the ranks, against one mean over the
union; other blocking in the matrix products), so each gradient element carries a rounding
error of about ``eps * sqrt(L)`` of its size, ``L`` the number of terms summed into it
(rounding errors of a sum of ``L`` terms add as a random walk). An update carries that
relative error, and each step adds its own: after ``k`` steps the parameters of a tensor differ
by at most about ``eps * sqrt(L) * k * path``, ``path`` the length of the way the tensor went
(the sum of its updates' norms, the reference's), where ``k`` bounds what a difference grows
through the steps after it. Adding an update to a parameter rounds to ``eps`` of the
parameter: a difference of one unit in the last place per element and step, about
``eps * sqrt(k) * |p|``. ``L`` is not known from outside (it is the batch times the positions
for a weight, more through the layers above it); ``max(numel, samples per step)`` bounds it for
the tensors of the corpus, and ``C`` = 8 leaves room over what clean scripts measure.
Measured (``tests/test_doctor_reference.py``, the corpus): with the forward in the ranks'
chunks, clean float32 runs differ by 0 to 1e-7 (a 50-step Adam run: 0 at every step; the
Hugging Face-style loop, AdamW with accumulation: 6e-8), while a learning rate 1 % off on one
rank exceeds the allowance about 200 times at its first step.

    allowed(k) = C * (eps_c * k * sqrt(max(numel, samples)) * path + eps_p * sqrt(k) * |p_k|)

with ``eps_p`` the parameter dtype's (float32: 1.2e-7) and ``eps_c`` the dtype the forwards
compute in: the parameter's, or autocast's (bfloat16: 7.8e-3, float16: 9.8e-4), whose
rounding the gradients then carry.
"""

from __future__ import annotations

import dataclasses
import math
import os

from ddplab.doctor.reference import layout

C = 8.0


@dataclasses.dataclass(frozen=True)
class TensorDiff:
    """One tensor of one rank after one step, against the reference's."""

    step: int
    rank: int
    name: str
    shape: tuple
    max_abs: float  # largest element difference
    rel: float  # norm of the difference over the reference's path length
    norm: float  # norm of the difference
    allowed: float  # the allowance for that norm

    @property
    def over(self) -> float:
        return self.norm / self.allowed if self.allowed else (math.inf if self.norm else 0.0)


@dataclasses.dataclass
class Comparison:
    world_size: int
    steps: list  # the steps compared
    samples: dict  # step -> samples the N ranks trained on
    served: dict  # step -> samples the reference was fed
    worst: TensorDiff | None = None  # the largest over allowance, or the largest rel
    first: TensorDiff | None = None  # the first beyond its allowance (step, rank, model order)
    largest_abs: float = 0.0
    largest_rel: float = 0.0
    update: dict | None = None  # at ``first``'s step: the rank's update against the reference's
    lr_own: dict = dataclasses.field(default_factory=dict)  # step -> the LRs the reference set
    lr_ranks: dict = dataclasses.field(default_factory=dict)  # (step, rank) -> LRs
    notes: dict = dataclasses.field(default_factory=dict)  # side -> notes of its rank 0

    def misaligned(self) -> list:
        """Steps where the reference was fed other than the N ranks' samples."""
        return [k for k in self.steps if self.served.get(k) != self.samples.get(k)]


def allowed(step: int, numel: int, samples: int, path: float, norm: float, eps: float,
            compute_eps: float | None = None) -> float:
    return C * ((compute_eps or eps) * step * math.sqrt(max(numel, samples, 1)) * path
                + eps * math.sqrt(step) * norm)


def _load(folder, side, step, rank):
    file = layout.path(folder, side, "state", step, rank)
    return layout.load(file) if os.path.exists(file) else None


def _norm(t) -> float:
    return float(t.double().norm())


def compare(folder: str, world_size: int, steps: int) -> Comparison:
    import torch

    init = layout.load(layout.init_path(folder))
    result = Comparison(world_size, [], {}, {}, notes={
        side: layout.read_json(layout.path(folder, side, "notes", None, 0), {})
        for side in (layout.RUN, layout.REFERENCE)})
    autocast = result.notes[layout.RUN].get("autocast")
    compute_eps = torch.finfo(getattr(torch, autocast)).eps if autocast else None
    before = {name: t for name, t in init.items()}
    path: dict[str, float] = {}
    previous = {r: dict(before) for r in range(world_size)}
    for step in range(1, steps + 1):
        own = layout.read_json(layout.path(folder, layout.REFERENCE, "own_lr", step, 0))
        if own is not None:
            result.lr_own[step] = own
        for rank in range(world_size):
            lr = layout.read_json(layout.path(folder, layout.RUN, "lr", step, rank))
            if lr is not None:
                result.lr_ranks[(step, rank)] = lr
        ref = _load(folder, layout.REFERENCE, step, 0)
        if ref is None:
            continue
        result.steps.append(step)
        result.samples[step], result.served[step] = ref.get("planned"), ref.get("samples")
        for name, b in ref["params"].items():
            path[name] = path.get(name, 0.0) + _norm(b - before[name]) \
                if name in before and before[name].shape == b.shape else path.get(name, 0.0)
        for rank in range(world_size):
            state = _load(folder, layout.RUN, step, rank)
            if state is None:
                continue
            for name, b in ref["params"].items():
                a = state["params"].get(name)
                if a is None or a.shape != b.shape:
                    continue
                delta = (a.double() - b.double())
                norm = _norm(delta)
                eps = torch.finfo(b.dtype).eps if b.dtype.is_floating_point else 0.0
                diff = TensorDiff(step, rank, name, tuple(b.shape),
                                  float(delta.abs().max()) if delta.numel() else 0.0,
                                  norm / path[name] if path.get(name) else
                                  (0.0 if norm == 0 else math.inf), norm,
                                  allowed(step, b.numel(), result.samples[step] or 0,
                                          path.get(name, 0.0), _norm(b), eps,
                                          max(eps, compute_eps or 0.0)))
                result.largest_abs = max(result.largest_abs, diff.max_abs)
                result.largest_rel = max(result.largest_rel, diff.rel)
                if result.worst is None or diff.over > result.worst.over:
                    result.worst = diff
                if result.first is None and diff.over > 1:
                    result.first = diff
                    result.update = _update(previous[rank].get(name), a,
                                            before.get(name), b)
            previous[rank] = state["params"]
        before = ref["params"]
    return result


def _update(a_before, a, b_before, b) -> dict | None:
    """The rank's own update at this step against the reference's: their norms' ratio and
    cosine (2.0 and 1.0: the same direction, twice as far)."""
    if a_before is None or b_before is None:
        return None
    da, db = (a - a_before).double().flatten(), (b - b_before).double().flatten()
    nb = float(db.norm())
    if nb == 0:
        return None
    return {"ratio": float(da.norm()) / nb,
            "cosine": float(da @ db) / (float(da.norm()) * nb) if float(da.norm()) else 0.0}
