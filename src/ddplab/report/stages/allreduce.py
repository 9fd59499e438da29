"""The all-reduce against message size over every rank (the chapter's ``allreduce.run``), the
latency and bandwidth fitted to it, and the memory-copy bandwidth DDP's copies run at (one
rank measures that alone)."""

from __future__ import annotations

import dataclasses

from ddplab.chapters.time_cost import allreduce, cost_model, latency_fit
from ddplab.report.figures import compared, measured_only, value
from ddplab.report.settings import ReportSettings
from ddplab.report.stage import NEEDS_RANKS, Section, Stage
from ddplab.report.stages.machine import MachineSection


@dataclasses.dataclass
class AllReduceSection(Section):
    copy_bandwidth: float  # bytes copied per second, measured at any world size
    result: allreduce.AllReduce | None = None  # None at one rank
    link: cost_model.Link | None = None  # the ring link behind the fit; None at one rank

    @property
    def fit(self) -> latency_fit.LatencyBandwidthFit | None:
        """``T(S) = alpha + S/B`` over every rank, non-negative, flagged where the times
        cannot support it; None at one rank."""
        return None if self.result is None else self.result.fit


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


def measure(s: ReportSettings, machine: MachineSection) -> AllReduceSection:
    if machine.world_size < 2:  # one rank still measures the copy bandwidth DDP's copies use
        result = allreduce.run(1, sizes=(4 * 1024,), repeats=1, timeout=s.timeout)
        copy = result.copy_bandwidth_bytes_per_s
        return AllReduceSection({"missing": f"the all-reduce {NEEDS_RANKS}",
                                 "copy_bandwidth": measured_only(copy, "bytes/s")}, copy)
    sizes = sizes_that_fit(s.sizes, machine.data)
    result = allreduce.run(machine.world_size, sizes=sizes, repeats=s.repeats,
                           timeout=s.timeout)
    fit, copy = result.fit, result.copy_bandwidth_bytes_per_s
    # the link over every rank of this run: under torchrun no other world size can run
    link = cost_model.link_from_fit(fit.alpha_s, fit.bandwidth, result.world_size,
                                    "measured here")
    return AllReduceSection({
        "world_size": result.world_size,
        "scope": "across nodes" if machine.nodes > 1 else "inside one node",
        "missing": "; ".join(
            ([f"sizes above {allreduce.human(max(sizes))}: too little memory free"]
             if len(sizes) < len(s.sizes) else [])
            + (["inside each node: this report all-reduces over every rank only"]
               if machine.nodes > 1 else [])) or None,
        "sizes": [{"bytes": size, "time": compared(t, fit.seconds(size), "s"),
                   "algbw": value(alg, "bytes/s"), "busbw": value(bus, "bytes/s")}
                  for size, t, alg, bus in zip(result.sizes_bytes, result.seconds,
                                               result.algbw, result.busbw)],
        "fit": {"alpha": value(fit.alpha_s, "s"), "bandwidth": value(fit.bandwidth, "bytes/s"),
                "supported": fit.supported, "note": fit.note or None},
        "link": {"alpha_per_step": value(link.alpha_s, "s"),
                 "busbw": value(link.bandwidth, "bytes/s")},
        "copy_bandwidth": measured_only(copy, "bytes/s"),
    }, copy, result, link)


def figures(section: AllReduceSection) -> list:
    """Measured all-reduce times and the (constrained) fit ``alpha + S/B``."""
    if section.result is None:
        return []
    import matplotlib.pyplot as plt  # the page only: ranks that import the report draw nothing
    import numpy as np

    from ddplab.screen.style import PAGE_WIDTH

    result, fit = section.result, section.fit
    fig, ax = plt.subplots(figsize=(PAGE_WIDTH * 0.6, 3.0), constrained_layout=True)
    sizes = np.array(result.sizes_bytes, dtype=float)
    ax.loglog(sizes, 1e3 * np.array(result.seconds), "o", ms=4, label="measured (median)")
    fine = np.geomspace(sizes[0], sizes[-1], 50)
    ax.loglog(fine, [1e3 * fit.seconds(size) for size in fine], "-", lw=1,
              label=f"model: {1e6 * fit.alpha_s:.0f} us + S / {fit.bandwidth / 1e9:.3g} GB/s")
    ax.set_xlabel("message size S, bytes", fontsize=9)
    ax.set_ylabel("ms per all-reduce", fontsize=9)
    ax.legend(fontsize=7)
    return [fig]


def rows(part: dict) -> list:
    """The smallest and the largest all-reduce."""
    sizes = part.get("sizes") or []
    return [(f"all-reduce of {allreduce.human(row['bytes'])}", row["time"])
            for row in sizes[:1] + sizes[-1:]]


STAGE = Stage(
    name="allreduce", key="allreduce", what="all-reduce against message size",
    measure=measure, needs=("machine",),
    title="All-reduce against message size",
    about="Median time of an all-reduce of each size on the slowest rank; algbw = S/t and "
          "busbw = algbw x 2(n-1)/n as nccl-tests defines them; the model is T(S) = alpha + "
          "S/B fitted to these times.",
    book="time_cost.md#the-all-reduce", figures=figures, rows=rows)
