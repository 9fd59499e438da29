"""``diagnose(script)``: run the reader's script on instrumented ranks and judge it.

    from ddplab.doctor.launch import diagnose
    diagnosis = diagnose("train.py", ["--epochs", "2"], world_size=2)
    print(text.report(diagnosis)); diagnosis.exit_code()

Bad input raises ``BadInput`` (a ``ValueError``) before any process starts.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

import ddplab.doctor.records as records
from ddplab.doctor.judging import checks
from ddplab.doctor.judging.evidence import Evidence
from ddplab.doctor.judging.findings import Diagnosis, RunOutcome, shown_from
from ddplab.doctor.launch import launcher, reference
from ddplab.doctor.launch.inputs import check_numbers, check_script
from ddplab.doctor.launch.processes import Zygote
from ddplab.doctor.messages import Crash
from ddplab.doctor.settings import DEFAULTS, Settings

OUTPUT_LINES = 12  # of the script's own output, shown when it exits with an error status


def diagnose(script: str, args=(), world_size: int = DEFAULTS.world_size,
             steps: int = DEFAULTS.steps, timeout: float = DEFAULTS.timeout,
             batches: int = DEFAULTS.batches,
             cwd: str | None = None, zygote: Zygote | None = None) -> Diagnosis:
    """Run ``script args`` on ``world_size`` ranks in ``cwd`` and judge it. ``zygote`` lets
    several diagnoses share one (the corpus tests); one is made and closed otherwise."""
    check_script(script)
    check_numbers(world_size, steps, timeout)
    with tempfile.TemporaryDirectory(prefix="ddplab-doctor-") as logs:
        settings = Settings(world_size=world_size, steps=steps, batches=batches,
                            timeout=timeout, record=os.path.join(logs, "reference"))
        own = zygote is None
        if own:
            zygote = Zygote(launcher.base_environment(), os.path.join(logs, "zygote.log"))
        try:
            run = launcher.run(script, list(args), settings, zygote, cwd)
            evidence = Evidence(run)
            if _needs_probe(evidence):
                probe = launcher.run(script, list(args), dataclasses.replace(
                    settings, world_size=1, steps=1, role="probe"), zygote, cwd)
                evidence.probe = Evidence(probe) if probe.evidence else None
            evidence.reference = reference.run(script, args, settings, zygote, cwd, evidence)
        finally:
            if own:
                zygote.close()
    return diagnosis_of(script, evidence, cwd or os.getcwd())


def diagnosis_of(script: str, evidence, root: str | None = None) -> Diagnosis:
    """The checks' verdicts on the evidence of a finished run (local, or under torchrun);
    paths in messages are shown from ``root``, the folder the script ran in."""
    run = evidence.run
    with shown_from(root):
        verdicts = checks.judge(evidence)
    crash = evidence.crashed()
    if (crash is None and not run.outcomes and run.launcher is None
            and run.mode != records.Mode.NONE):
        crash = Crash("", "the process ended without a report", run.output.get("rank0", ""),
                      rank=0)
    if crash is not None and crash.exited:  # no traceback: what the script said before
        said = run.output.get(f"rank{crash.rank or 0}", "").rstrip().splitlines()
        crash = dataclasses.replace(crash, traceback="".join(
            line + "\n" for line in said[-OUTPUT_LINES:]) + crash.traceback)
    return Diagnosis(script=os.path.abspath(script), world_size=run.world_size,
                     backend_requested=evidence.requested_backend(),
                     backend_used=evidence.used_backend(), steps_run=evidence.steps_run(),
                     outcome=_outcome(run, evidence, crash), checks=verdicts, crash=crash,
                     crash_explained=any(f.explains for v in verdicts for f in v.findings),
                     hang=run.hang if evidence.hung() else None, seconds=run.seconds,
                     output=run.output, root=root, mapped=evidence.mapped(),
                     writes=evidence.writes(), trackers=evidence.trackers())


def _needs_probe(evidence) -> bool:
    """A one-rank run, stopped at its first step, tells whether batch and LR follow the world
    size; needed only when the script read the world size before its first step."""
    return bool(evidence.run.mode == records.Mode.RANKS and (evidence.world_size or 0) > 1
                and evidence.all(records.WorldSizeRead) and evidence.steps_run() > 0
                and not evidence.hung() and evidence.crashed() is None)


def _outcome(run, evidence, crash) -> RunOutcome:
    if evidence.hung():
        return RunOutcome.HANG
    if crash is not None:
        return RunOutcome.CRASHED
    if run.mode == records.Mode.NONE or (run.mode == records.Mode.SPAWN and not run.outcomes):
        return RunOutcome.NO_GROUP
    stopped = any(o.outcome == records.Outcome.STOPPED for o in run.outcomes.values())
    return RunOutcome.STOPPED if stopped else RunOutcome.FINISHED
