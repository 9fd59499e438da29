"""The bytes each rank holds after an Adam step under DDP, ZeRO-1 and FSDP (the memory
chapter's ``memory.run``), against the chapter's calculator. A strategy the placement cannot
run is named as missing, with what to do instead."""

from __future__ import annotations

import dataclasses

import ddplab
from ddplab.chapters.memory import memory
from ddplab.engine.placement import unsupported
from ddplab.report.figures import compared, measured_only
from ddplab.report.settings import ReportSettings
from ddplab.report.stage import Section, Stage
from ddplab.report.stages.machine import MachineSection


@dataclasses.dataclass
class MemorySection(Section):
    results: dict  # strategy -> memory.Memory, for each strategy run


def measure(s: ReportSettings, machine: MachineSection) -> MemorySection:
    rows, results, missing = {}, {}, []
    where = ddplab.placement()
    for strategy in s.strategies:
        refused = unsupported(strategy, where)
        if refused:
            missing.append(f"{strategy}: not run on {where}: {refused}")
            continue
        result = memory.run(machine.world_size, strategy, "adam", s.memory_params_millions,
                            steps=1, timeout=s.timeout)
        results[strategy] = result
        predicted = sum(result.predicted_per_rank.values())
        malloc = result.measured_bytes_per_rank[0]
        rows[strategy] = {"total": compared(max(result.total_per_rank), predicted, "bytes"),
                          "by_category": {k: compared(result.bytes_per_rank[0][k], v, "bytes")
                                          for k, v in result.predicted_per_rank.items()
                                          if k in result.bytes_per_rank[0]},
                          "malloc": None if malloc is None else measured_only(malloc, "bytes")}
    missing += [f"{name}: left out by --quick" for name in ("fsdp",)
                if name not in s.strategies]
    return MemorySection({"optimizer": "adam", "params": results["ddp"].parameter_count,
                          "strategies": rows, "missing": "; ".join(missing) or None}, results)


def figures(section: MemorySection) -> list:
    from ddplab.chapters.memory import plots  # matplotlib: the page only

    return [plots.strategies(list(section.results.values()), list(section.results))]


def rows(part: dict) -> list:
    return [(f"memory per rank, {name}", row["total"])
            for name, row in (part.get("strategies") or {}).items()]


STAGE = Stage(
    name="memory", key="memory", what="memory per rank", measure=measure, needs=("machine",),
    title="Memory per rank",
    about="Bytes each rank holds after an Adam step, counted tensor by tensor, against the "
          "memory chapter's calculator.",
    book="memory.md#what-one-ddp-rank-holds", figures=figures, rows=rows)
