"""The reference run, after the N-rank run: the same script and arguments as one process, fed
the N ranks' recorded batches (``doctor/reference``), then compared with them.

Its settings are the N-rank run's with one rank, the role ``reference``, and room for as many
batches per epoch as the N ranks had in all (a script that takes N times more micro-steps must
not be cut short of the samples it is fed).
"""

from __future__ import annotations

import dataclasses

from ddplab.doctor.judging.evidence import Evidence
from ddplab.doctor.launch import launcher
from ddplab.doctor.reference import compare, plan
from ddplab.doctor.reference.outcome import Outcome


def run(script: str, args: list, settings, zygote, cwd, evidence) -> Outcome:
    """The comparison, or why none was made."""
    folder = settings.record
    why = plan.why_not(evidence, folder) if folder else "nothing was recorded"
    if why is not None:
        return Outcome(skipped=why)
    told = plan.write(evidence, folder)
    one = dataclasses.replace(settings, world_size=1, role="reference",
                              batches=settings.batches * settings.world_size)
    done = launcher.run(script, list(args), one, zygote, cwd)
    seen = Evidence(done)
    if seen.crashed() is not None or seen.hung():
        crash = seen.crashed()
        return Outcome(skipped="the one-process run did not end normally"
                       + (f": {crash.error}" if crash is not None else ""),
                       evidence=seen, seconds=done.seconds)
    return Outcome(comparison=compare.compare(folder, told["world_size"], told["steps"]),
                   evidence=seen, plan=told, seconds=done.seconds)
