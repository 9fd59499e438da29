"""``reference-differs``: the N ranks against one process on the same samples (the reference
run, ``doctor/reference``), step by step: every rank's parameters, the learning rates, the
numbers rank 0 printed.

A difference nothing explains is an error (one the checks before it explain, an advisory
that names them) naming the first step, the tensor (name, shape, how
far, against the float allowance) or the printed line (both texts, both numbers, the ratio),
with what the other checks found as the likely cause. A difference the script chose is an
advisory naming its factor: a learning rate scaled with the world size (the one process then
runs at the ranks' rate so that the rest compares), a loss summed over each rank's batch, rank
0 printing its own loss where one process prints the whole batch's. When nothing differs, the
verdict is the one line that says so, with the numbers.
"""

from __future__ import annotations

import math
import re

import ddplab.doctor.records as records
from ddplab.doctor.judging.check import EVERY_CHECK_BEFORE, Check
from ddplab.doctor.judging.findings import place
from ddplab.doctor.judging.judgement import Problem, file_line, found, not_applicable, passed
from ddplab.doctor.reference import layout
from ddplab.doctor.reference import printed as printed_lines

FIX = """\
# one DDP step equals one process stepping on the union of the ranks' batches:
loss = loss_fn(model(x), y)  # a mean over the rank's batch; DDP averages the gradients
loss.backward()  # no all-reduce of the gradients by hand, no factor of the world size
optimizer.step()  # one learning rate, changed on every rank alike
# a printed mean over the ranks: all_reduce(SUM) of sums and counts, divided once"""


def _g(value: float) -> str:
    return f"{value:.3g}"


def _lr_findings(evidence, comparison, n) -> tuple[list, list]:
    """Errors (a rank's LR not rank 0's), and what the script chose (the LR scaled with the
    world size: said in the verdict, not a finding)."""
    errors, chosen = [], []
    step_line = next(iter(evidence.records(records.Step)), None)
    for (step, rank), lrs in sorted(comparison.lr_ranks.items()):
        first = comparison.lr_ranks.get((step, 0))
        if rank and first is not None and lrs != first:
            group = next(i for i, (a, b) in enumerate(zip(lrs, first)) if a != b)
            errors.append(Problem(
                f"from optimizer step {step} the ranks step at different learning rates: "
                f"rank {rank} at {lrs[group]:.6g}, rank 0 at {first[group]:.6g} (parameter "
                f"group {group}); one process steps at one rate. A scheduler or an LR change "
                "that runs on some ranks only is the likely cause",
                {"step": step, "rank": rank, "group": group, "lr": lrs[group],
                 "rank0_lr": first[group]}, *file_line(step_line)))
            break
    own, ranks = comparison.lr_own.get(1), comparison.lr_ranks.get((1, 0))
    if own and ranks and own != ranks and all(isinstance(v, (int, float)) and v for v in own):
        factor = ranks[0] / own[0]
        named = (f"x{n}, linear in the world size" if math.isclose(factor, n, rel_tol=1e-6)
                 else f"x{factor:.4g}, the square root of the world size"
                 if math.isclose(factor, math.sqrt(n), rel_tol=1e-6) else f"x{factor:.4g}")
        chosen.append(f"the learning rate follows the world size ({named}: "
                          f"{ranks[0]:.6g} on {n} ranks, {own[0]:.6g} in one process, which "
                          "stepped at the ranks' rate)")
    return errors, chosen


def _backward_of(evidence, rank: int = 0):
    return next((b for s in evidence.records(records.Step, rank) for b in s.backwards), None)


def _explained_update(evidence, update, n) -> str | None:
    """A chosen form of the loss that makes each step move 1/N as far: a sum over the rank's
    batch, which DDP averages over the ranks."""
    if update is None or not math.isclose(update["ratio"], 1 / n, rel_tol=1e-3):
        return None
    back = _backward_of(evidence)
    if back is not None and back.under and back.under.startswith("Sum"):
        return (f"the loss is a sum over each rank's batch ({back.under} under backward at "
                f"{place(back.file, back.line)}): DDP averages the ranks' gradients, so each "
                f"step moves 1/{n} as far as one process summing over the same samples")
    return None


def _cause(evidence, earlier, diff, update, n) -> str:
    ids = [f.id for f in earlier.every() if f.kind in ("error", "waste")]
    said = []
    if update is not None:
        said.append(f"rank {diff.rank}'s update at this step is {update['ratio']:.4g} times "
                    f"the one process's (cosine {update['cosine']:.3f})")
        back = _backward_of(evidence, diff.rank)
        if math.isclose(update["ratio"], n, rel_tol=1e-3):
            ops = back.ops if back is not None else []
            if any(op == f"x {n}" or op == f"x {float(n):g}" for op in ops):
                said.append(f"the loss is multiplied by the world size ({', '.join(ops)} "
                            f"under backward at {place(back.file, back.line)})")
            else:
                said.append(f"the gradients are {n} times what DDP's average gives: summed "
                            "over the ranks (an all-reduce of the gradients by hand, not "
                            "divided), or a loss multiplied by the world size")
        elif update["cosine"] < 0.999:
            said.append("the update points elsewhere: the rank computed its gradients on "
                        "other samples or through another model (a forward that bypasses "
                        "DDP, replicas that differ)")
    if ids:
        said.append("the checks above found " + ", ".join(sorted(set(ids))))
    return "; ".join(said)


def reference_differs(evidence, earlier):
    outcome = evidence.reference
    if outcome is None:
        return not_applicable("no reference run (a run under torchrun, or none recorded)")
    if outcome.comparison is None:
        return not_applicable(f"no reference run: {outcome.skipped}")
    c, n = outcome.comparison, evidence.world_size
    if not c.steps:
        return not_applicable("the one-process run took no step that could be compared")
    errors, chosen_lr = _lr_findings(evidence, c, n)
    advisories = []
    misaligned = c.misaligned()
    if misaligned:
        k = misaligned[0]
        return not_applicable(
            f"the one process could not be fed the ranks' samples step for step (step {k}: "
            f"{c.served.get(k)} samples where the {n} ranks trained on {c.samples.get(k)})")
    if c.first is not None:
        d = c.first
        chosen = _explained_update(evidence, c.update, n)
        text = (f"after optimizer step {d.step}, rank {d.rank}'s {d.name} {list(d.shape)} "
                f"differs from one process's on the same {c.samples.get(d.step)} samples: "
                f"largest element {_g(d.max_abs)}, norm {_g(d.norm)} = {_g(d.rel)} of its "
                f"path, {_g(d.over)} times the float32 allowance {_g(d.allowed)}")
        about = {"step": d.step, "rank": d.rank, "parameter": d.name, "shape": list(d.shape),
                 "max_abs": d.max_abs, "norm": d.norm, "allowed": d.allowed,
                 "over": d.over, "update": c.update}
        step = next((s for s in evidence.records(records.Step, d.rank)
                     if s.number == d.step), None)
        if chosen:
            advisories.append(Problem(f"{text}; {chosen}", about, *file_line(step),
                                      kind="advisory"))
        elif errors:  # the learning rates: the parameters are their proof
            errors[0].message += f"; {text}"
            errors[0].evidence.update(parameter=d.name, over=d.over, max_abs=d.max_abs,
                                      parameter_step=d.step)
        elif not c.notes.get(layout.REFERENCE, {}).get("chunked"):
            # the one process ran its forward whole (its script takes a branch without DDP
            # there): a layer that depends on the batch (BatchNorm) saw more samples than any
            # rank's, so the difference proves nothing
            advisories.append(Problem(
                f"{text}; the one process did not run its forward through DDP, in the ranks' "
                "chunks, so a layer that depends on its batch saw the whole batch: advice, not "
                "proof", about, *file_line(step), kind="advisory"))
        else:
            cause = _cause(evidence, earlier, d, c.update, n)
            errors.append(Problem(text + (f". {cause}" if cause else ""), about,
                                  *file_line(step)))
    lines = printed_lines.compare(printed_lines.lines_of(evidence),
                                  printed_lines.lines_of(outcome.evidence))
    own_losses, lr_lines, printed_named = [], 0, False
    for p in lines.diffs:
        if p.integer:
            continue
        ranks_own = printed_lines.own_loss(p.ranks_value, _shown(p.ranks_text, p.ranks_value),
                                           evidence.records(records.Step, 0), p.step)
        one_own = printed_lines.own_loss(p.one_value, _shown(p.one_text, p.one_value),
                                         outcome.evidence.records(records.Step), p.step)
        if ranks_own and one_own:
            own_losses.append(p)
            continue
        if chosen_lr and _is_lr(p, c):  # the learning rate itself, scaled as chosen
            lr_lines += 1
            continue
        if not errors and not printed_named:
            printed_named = True  # the first printed difference only
            # proof only where the ratio is the world size's factor: any other number may be
            # one rank 0 computed on its own samples (a running mean of its own losses)
            factor = p.ratio is not None and any(
                math.isclose(p.ratio, f, rel_tol=2e-3) for f in (n, 1 / n))
            (errors if factor else advisories).append(Problem(
                f"after optimizer step {p.step}, rank 0 printed {p.ranks_text!r} where one "
                f"process on the same samples printed {p.one_text!r}: {p.ranks_value:.6g} "
                f"against {p.one_value:.6g}, "
                + (f"ratio {printed_lines.ratio_words(p.ratio, n)}" if p.ratio is not None
                   else "no ratio: the one process printed 0")
                + ("" if factor else " (or a number of rank 0's own samples: advice, not "
                   "proof)"),
                {"step": p.step, "ranks_text": p.ranks_text, "one_text": p.one_text,
                 "ranks_value": p.ranks_value, "one_value": p.one_value, "ratio": p.ratio},
                p.file, p.line, kind=None if factor else "advisory"))
    if own_losses:
        p = own_losses[0]
        advisories.append(Problem(
            f"rank 0 prints its own loss, on its 1/{n} of each step's samples, where one "
            f"process prints the whole batch's ({p.ranks_text!r} against {p.one_text!r} after "
            f"step {p.step}; {len(own_losses)} such numbers)",
            {"lines": len(own_losses)}, p.file, p.line, kind="advisory"))
    explained = sorted({f.id for f in earlier.every() if f.kind == "error"})
    if explained:  # a difference the checks above already name is theirs to explain
        for problem in errors:
            problem.kind = "advisory"
            if "the checks above found" not in problem.message:
                problem.message += f". The checks above found {', '.join(explained)}"
    if errors or advisories:
        return found(*errors, *advisories)
    steps, largest = len(c.steps), c.largest_abs
    said = (f"every printed number equal ({lines.numbers} in {lines.lines} lines"
            + (f"; {lr_lines} learning rates in the ratio chosen" if lr_lines else "") + ")"
            if lines.lines else "no printed number to compare")
    dropped = c.notes.get("run", {}).get("dropout_off")
    samples = sorted(set(c.samples.values()))
    per_step = samples[0] if len(samples) == 1 else f"{samples[0]} to {samples[-1]}"
    return passed(f"{n} ranks and one process on the same {per_step} samples per step agree "
                  f"at every one of {steps} steps (largest parameter difference "
                  f"{largest:.1g}; {said})" + "".join(f"; {c}" for c in chosen_lr)
                  + (f"; {dropped} dropout layers off in both runs" if dropped else ""))


def _is_lr(p, comparison) -> bool:
    """Whether a printed pair is the learning rate: rank 0's at some step and the one
    process's own at some step, or a line that says it prints the learning rate and whose
    numbers are in the ratio of the learning rates chosen."""
    def near(value, text, rates):
        unit = printed_lines._unit(_shown(text, value))
        return any(isinstance(r, (int, float)) and abs(r - value) <= unit for r in rates)

    ranks = [r for (_, rank), lrs in comparison.lr_ranks.items() if rank == 0 for r in lrs]
    own = [r for lrs in comparison.lr_own.values() for r in lrs]
    if near(p.ranks_value, p.ranks_text, ranks) and near(p.one_value, p.one_text, own):
        return True
    first, mine = comparison.lr_ranks.get((1, 0)), comparison.lr_own.get(1)
    factor = first[0] / mine[0] if first and mine and mine[0] else None
    unit = printed_lines._unit(_shown(p.one_text, p.one_value))
    return bool(factor and re.search(r"\blr\b|learning.rate", p.ranks_text, re.IGNORECASE)
                and abs(p.ranks_value - factor * p.one_value) <= factor * unit)


def _shown(text: str, value: float) -> str:
    """The number as the line shows it (for its precision)."""
    for shown, v in printed_lines.numbers_of(text):
        if v == value:
            return shown
    return repr(value)


REFERENCE_DIFFERS = Check(
    "reference-differs", "error",
    "the ranks train as one process does on the same samples: parameters, learning rates and "
    "printed numbers, step by step",
    "averaging-naive",
    FIX, reference_differs, defers_to=EVERY_CHECK_BEFORE, also=("advisory",))
