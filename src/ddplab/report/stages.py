"""The report's measurements, one stage each, in order: every stage calls a chapter's public
driver (which runs on the local pool or under torchrun alike) and returns its JSON section,
each figure the model predicts as ``{measured, predicted, ratio, unit}``. A stage that cannot
run here returns ``{"missing": why}``. The raw chapter results are kept in ``found`` for the
figures."""

from __future__ import annotations

import dataclasses

import ddplab
from ddplab.chapters.memory import calculator, memory
from ddplab.chapters.time_cost import (
    accumulation_time,
    allreduce,
    bucket_size,
    calibration,
    cost_model,
    step_time,
)
from ddplab.common import mlp
from ddplab.engine.placement import unsupported
from ddplab.report import machine
from ddplab.report.figures import compared, measured_only, predicted_only
from ddplab.report.model import Calibrated
from ddplab.report.settings import BATCH_SIZE, MICRO_BATCH_SIZE, MiB, Settings

NEEDS_RANKS = "needs at least 2 ranks: run with --world-size 2 or more (or torchrun)"
NODE_MULTIPLES = (2, 4)


class NotEnoughMemory(ValueError):
    """The model asked for cannot fit in what the machine has free."""


def value(x, unit: str) -> dict:
    return {"value": None if x in (None, float("inf")) else float(x), "unit": unit}


def machine_stage(s: Settings, found: dict) -> dict:
    section = machine.describe(s.world_size, s.timeout)
    found["model"] = Calibrated(mlp.param_count(s.layers), section["world_size"], BATCH_SIZE)
    check_memory(s, section)
    return section


def bytes_needed_per_rank(s: Settings) -> float:
    """The largest stage's bytes on one rank: the step stage holds the model twice (with and
    without DDP, ``step_time.paired``) with gradients and DDP's buckets, the memory stage one
    Adam model (the calculator's count); activations and buffers taken as the same again."""
    step = 5 * 4 * mlp.param_count(s.layers)
    adam = sum(calculator.bytes_per_rank(s.memory_params_millions * 1e6, "adam", "ddp",
                                         s.world_size).values())
    return 2 * max(step, adam)


def check_memory(s: Settings, section: dict) -> None:
    free = section["available_memory"]
    if free is None:
        return
    per_host = max(section["ranks_per_host"].values())
    on_gpu = section["device_memory"] is not None  # a GPU per rank: its own memory
    need = bytes_needed_per_rank(s) * (1 if on_gpu else per_host)
    if need > free["value"]:
        where = "one GPU" if on_gpu else f"one host ({per_host} ranks)"
        raise NotEnoughMemory(
            f"too little memory: a model of {mlp.param_count(s.layers) / 1e6:,.1f} M parameters "
            f"needs about {need / 1e9:,.1f} GB on {where}, and {free['value'] / 1e9:,.1f} GB is "
            f"free; choose a smaller --params-millions")


def sizes_that_fit(sizes, machine_section: dict) -> list[int]:
    """The message sizes whose tensors (and as much again of the backend's buffers) fit in a
    quarter of the memory free, for every rank of a host (or on each GPU)."""
    free = machine_section["available_memory"]
    if free is None:
        return list(sizes)
    ranks = (1 if machine_section["device_memory"] is not None
             else max(machine_section["ranks_per_host"].values()))
    fitting = [size for size in sizes if 2 * size * ranks <= free["value"] / 4]
    return fitting or list(sizes[:1])


def allreduce_stage(s: Settings, found: dict) -> dict:
    model = found["model"]
    if model.world_size < 2:  # one rank still measures the copy bandwidth DDP's copies use
        result = allreduce.run(1, sizes=(4 * 1024,), repeats=1, timeout=s.timeout)
        model.copy_bandwidth = result.copy_bandwidth_bytes_per_s
        return {"missing": f"the all-reduce {NEEDS_RANKS}",
                "copy_bandwidth": measured_only(model.copy_bandwidth, "bytes/s")}
    sizes = sizes_that_fit(s.sizes, found["sections"]["machine"])
    result = allreduce.run(model.world_size, sizes=sizes, repeats=s.repeats,
                           timeout=s.timeout)
    found["allreduce"] = result
    model.fit = result.fit  # non-negative, flagged where the times cannot support it
    model.copy_bandwidth = result.copy_bandwidth_bytes_per_s
    hosts = len(found["sections"]["machine"]["hosts"])
    return {
        "world_size": result.world_size,
        "scope": "across nodes" if hosts > 1 else "inside one node",
        "missing": "; ".join(
            ([f"sizes above {allreduce.human(max(sizes))}: too little memory free"]
             if len(sizes) < len(s.sizes) else [])
            + (["inside each node: this report all-reduces over every rank only"]
               if hosts > 1 else [])) or None,
        "sizes": [{"bytes": size, "time": compared(t, model.fit.seconds(size), "s"),
                   "algbw": value(alg, "bytes/s"), "busbw": value(bus, "bytes/s")}
                  for size, t, alg, bus in zip(result.sizes_bytes, result.seconds,
                                               result.algbw, result.busbw)],
        "fit": {"alpha": value(model.fit.alpha_s, "s"),
                "bandwidth": value(model.fit.bandwidth, "bytes/s"),
                "supported": model.fit.supported, "note": model.fit.note or None},
        "link": {"alpha_per_step": value(model.link.alpha_s, "s"),
                 "busbw": value(model.link.bandwidth, "bytes/s")},
        "copy_bandwidth": measured_only(model.copy_bandwidth, "bytes/s"),
    }


def step_stage(s: Settings, found: dict) -> dict:
    model = found["model"]
    alone, ddp = step_time.paired(model.world_size, BATCH_SIZE, s.layers,
                                  iterations=s.iterations)
    found["step"] = (alone, ddp)
    model.seconds_per_sample = (alone.median("forward") + alone.median("backward")) / BATCH_SIZE
    model.optimizer_s = alone.median("optimizer")
    p = model.predict()
    share = cost_model.BACKWARD_SHARE
    # DDP copies each gradient into its bucket during backward and back after the all-reduce
    # (at the end of backward(), "waiting" here): half the model's copy time in each
    predicted = {"forward": p.compute_s * (1 - share),
                 "backward": p.compute_s * share + p.copy_s / 2,
                 "waiting": p.exposed_s + p.copy_s / 2, "optimizer": p.optimizer_s,
                 "step": p.step_s}
    step = {phase: compared(ddp.median(phase), predicted[phase], "s") for phase in predicted}
    return {
        "params": model.params, "batch_size": BATCH_SIZE, "world_size": model.world_size,
        "phases": step,
        "without_ddp": {phase: measured_only(alone.median(phase), "s") for phase in predicted},
        "samples_per_s": compared(ddp.samples_per_s, p.samples_per_s, "samples/s"),
        # scaling efficiency, measured: the same ranks' steps without communication (every
        # rank busy, as in DDP) against DDP's
        "efficiency": compared(alone.median("step") / ddp.median("step"), p.efficiency, "1"),
        "model": {"compute": predicted_only(p.compute_s, "s"),
                  "copies": predicted_only(p.copy_s, "s"),
                  "exposed_allreduce": predicted_only(p.exposed_s, "s"),
                  "optimizer": predicted_only(p.optimizer_s, "s")},
        "margin": calibration.MARGIN,
        "within_margin": 1 / calibration.MARGIN <= step["step"]["ratio"] <= calibration.MARGIN,
        "buckets": p.buckets,
    }


def buckets_stage(s: Settings, found: dict) -> dict:
    model = found["model"]
    if model.world_size < 2:
        return {"missing": f"bucket sizes and accumulation {NEEDS_RANKS}"}
    sweep = bucket_size.run(s.caps, model.world_size, BATCH_SIZE, s.layers, s.iterations)
    found["buckets"] = sweep
    nbytes = 4 * model.params
    rows = []
    for cap, n, run in zip(sweep.caps, sweep.buckets, sweep.runs):
        p = model.predict(bucket_mb=cap)
        rows.append({"bucket_cap_mb": cap, "buckets": n,
                     "step": compared(run.median("step"), p.step_s, "s"),
                     "waiting": compared(run.median("waiting"), p.exposed_s + p.copy_s / 2,
                                         "s")})
    section = {"caps": rows, "measured_best_buckets": sweep.best_buckets}
    if model.fit.alpha_s > 0 and model.fit.bandwidth != float("inf"):
        best = bucket_size.best_bucket_count(nbytes, model.fit.bandwidth, model.fit.alpha_s)
        found["tradeoff"] = bucket_size.tradeoff(nbytes, model.fit.bandwidth, model.fit.alpha_s,
                                                 max(32, max(sweep.buckets)))
        section["model_best"] = {"buckets": value(best, "buckets"),
                                 "bucket_cap_mb": value(nbytes / best / MiB, "MiB")}
    else:
        section["model_best"] = {"missing": "the all-reduce fit has no latency or no "
                                            "bandwidth to trade off (see allreduce.fit.note)"}
    return section


def accumulation_stage(s: Settings, found: dict) -> dict:
    model = found["model"]
    if model.world_size < 2:
        return {"missing": f"accumulation {NEEDS_RANKS}"}
    timing = accumulation_time.run(model.world_size, MICRO_BATCH_SIZE, s.micro_batches, s.layers,
                                   iterations=s.accumulation_iterations)
    found["accumulation"] = timing
    # The model's compute is batch x seconds per sample, measured at the batch it predicts: a
    # micro-batch of 8 costs more than 8 samples at BATCH_SIZE's rate, because each backward
    # writes (or adds to) every parameter's gradient whatever the batch. Calibrated at
    # BATCH_SIZE, the rows ran 1.7-2.5x the model's (issue 40).
    alone, _ = step_time.paired(model.world_size, MICRO_BATCH_SIZE, s.layers,
                                iterations=s.iterations)
    micro = dataclasses.replace(model, seconds_per_sample=(
        alone.median("forward") + alone.median("backward")) / MICRO_BATCH_SIZE)
    rows = []
    for k, no_sync, every in zip(timing.micro_batches, timing.no_sync_s,
                                 timing.every_micro_batch_s):
        once = micro.predict(batch_size=MICRO_BATCH_SIZE, accumulation=k)
        one = micro.predict(batch_size=MICRO_BATCH_SIZE)
        # every micro-batch synced: k steps' worth of everything but the optimizer
        each = k * (one.step_s - one.optimizer_s) + one.optimizer_s
        rows.append({"micro_batches": k, "no_sync": compared(no_sync, once.step_s, "s"),
                     "every_micro_batch": compared(every, each, "s")})
    return {"batch_size": MICRO_BATCH_SIZE, "rows": rows,
            "seconds_per_sample": {
                "at_step_batch": measured_only(model.seconds_per_sample, "s"),
                "at_micro_batch": measured_only(micro.seconds_per_sample, "s")}}


def memory_stage(s: Settings, found: dict) -> dict:
    world_size = found["model"].world_size
    rows, results, missing = {}, {}, []
    where = ddplab.placement()
    for strategy in s.strategies:
        refused = unsupported(strategy, where)  # named as missing, with what to do instead
        if refused:
            missing.append(f"{strategy}: not run on {where}: {refused}")
            continue
        result = memory.run(world_size, strategy, "adam", s.memory_params_millions, steps=1,
                            timeout=s.timeout)
        results[strategy] = result
        predicted = sum(result.predicted_per_rank.values())
        malloc = result.measured_bytes_per_rank[0]
        rows[strategy] = {"total": compared(max(result.total_per_rank), predicted, "bytes"),
                          "by_category": {k: compared(result.bytes_per_rank[0][k], v, "bytes")
                                          for k, v in result.predicted_per_rank.items()
                                          if k in result.bytes_per_rank[0]},
                          "malloc": None if malloc is None else measured_only(malloc, "bytes")}
    found["memory"] = results
    missing += [f"{name}: left out by --quick" for name in ("fsdp",)
                if name not in s.strategies]
    return {"optimizer": "adam", "params": results["ddp"].parameter_count,
            "strategies": rows, "missing": "; ".join(missing) or None}


def prediction_stage(s: Settings, found: dict) -> dict:
    model = found["model"]
    if model.fit is None:
        return {"missing": f"a prediction for more nodes {NEEDS_RANKS}"}
    nodes = len(found["sections"]["machine"]["hosts"])
    out = {"what": "a PREDICTION of the calibrated model, not a measurement: the same ranks "
                   "per node, every link like the one measured here",
           "nodes": {}}
    for multiple in NODE_MULTIPLES:
        p = model.predict(ranks=model.world_size * multiple)
        out["nodes"][str(nodes * multiple)] = {
            "ranks": p.ranks, "step": predicted_only(p.step_s, "s"),
            "exposed_allreduce": predicted_only(p.exposed_s, "s"),
            "samples_per_s": predicted_only(p.samples_per_s, "samples/s"),
            "efficiency": predicted_only(p.efficiency, "1")}
    return out


# name, JSON key, what it measures (for progress lines and the "missing" list)
STAGES = (
    ("machine", "machine", "the machine", machine_stage),
    ("allreduce", "allreduce", "all-reduce against message size", allreduce_stage),
    ("step", "step", "one DDP step, with and without DDP", step_stage),
    ("buckets", "buckets", "bucket sizes", buckets_stage),
    ("accumulation", "buckets.accumulation", "accumulation with no_sync", accumulation_stage),
    ("memory", "memory", "memory per rank", memory_stage),
    ("prediction", "prediction", "prediction for more nodes", prediction_stage),
)
