"""The report's driver: run every stage of ``stages.STAGES`` in order, on the local pool or under
torchrun, each given the sections of the earlier stages it names in ``needs``, and collect one
JSON document (``report.json``) and the sections its figures draw.

    from ddplab import report
    made = report.run(world_size=2, quick=True)
    print(made.describe())           # the summary table
    made.write("ddplab-report")      # report.json and report.html (on rank 0 under torchrun)

A stage that fails (a rank that raises or dies, a rank that never arrives) ends the report
there: every part not measured is named under ``missing``, ``failure`` says what happened, and
the pool has already ended every rank process (ARCHITECTURE.md, "Failures").
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

from ddplab.common.progress import report as progress_report
from ddplab.common.results import to_json
from ddplab.engine.torchrun import is_reporting_process, launched_world_size, under_torchrun
from ddplab.report import stages
from ddplab.report.settings import ReportSettings
from ddplab.report.stage import Section, check
from ddplab.report.summary import summary_lines

SCHEMA_VERSION = 1


@dataclasses.dataclass
class Report:
    data: dict  # what report.json holds
    sections: dict[str, Section]  # stage name -> what it measured, for the figures

    @property
    def failure(self) -> str | None:
        return self.data["failure"]

    @property
    def missing(self) -> list[dict]:
        return self.data["missing"]

    def to_json(self) -> dict:
        return to_json(self.data)

    def describe(self) -> str:
        return "\n".join(summary_lines(self.data))

    def write(self, out: str = "ddplab-report") -> dict:
        """``out/report.json`` and ``out/report.html`` (rank 0 only under torchrun): their
        paths, or {} on the other ranks."""
        if not is_reporting_process():
            return {}
        from ddplab.report.page import render  # matplotlib: only where a page is written

        os.makedirs(out, exist_ok=True)
        paths = {"json": os.path.join(out, "report.json"),
                 "html": os.path.join(out, "report.html")}
        with open(paths["json"], "w") as f:
            json.dump(self.to_json(), f, indent=1, allow_nan=False)
        with open(paths["html"], "w") as f:
            f.write(render(self))
        return paths


def run(world_size: int | None = None, params_millions: float | None = None,
        quick: bool = False, timeout: float = 120.0, progress=None) -> Report:
    """Measure everything the report holds on ``world_size`` ranks (under torchrun:
    torchrun's), on this process's placement (``with ddplab.placed(device="cuda"):
    report.run(...)``). ``progress(done, total, label)`` is called before each stage."""
    if world_size is None:
        world_size = launched_world_size() if under_torchrun() else 2
    settings = ReportSettings(world_size, params_millions, quick, timeout)
    registry = check(stages.STAGES)
    data = {"schema_version": SCHEMA_VERSION, "settings": settings.to_json(),
            **{stage.key: None for stage in registry if stage.parent is None},
            "missing": [], "failure": None, "seconds": None}
    sections = {}
    start = time.perf_counter()
    for i, stage in enumerate(registry):
        progress_report(progress, i, len(registry), stage.what)
        try:
            section = stage.measure(settings, **{need: sections[need] for need in stage.needs})
        except ValueError:  # bad input (too little memory too), refused before ranks ran it
            raise
        except (Exception, KeyboardInterrupt) as exc:  # a rank failed, died or never arrived
            data["failure"] = (f"{stage.what} ({stage.name}) failed: {type(exc).__name__}: "
                               f"{first_line(exc)}")
            data["missing"] += [{"part": later.key, "why": f"not measured: {stage.what} failed"}
                                for later in registry[i:]]
            if isinstance(exc, KeyboardInterrupt):
                raise
            break
        sections[stage.name] = section
        place(data, stage.key, section.data)
        if section.missing:
            data["missing"].append({"part": stage.key, "why": section.missing})
    progress_report(progress, len(registry), len(registry), "done")
    data["seconds"] = time.perf_counter() - start
    return Report(data, sections)


def place(data: dict, key: str, part: dict) -> None:
    """Put a stage's part at its (dotted) key: "buckets.accumulation" inside "buckets"."""
    *outer, last = key.split(".")
    for name in outer:
        data = data[name]
    data[last] = part


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
