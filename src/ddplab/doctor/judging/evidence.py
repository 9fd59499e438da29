"""The ranks' reports, read for the checks: records by kind and rank, and a few questions
every check asks (which passes trained, which collectives a group saw)."""

from __future__ import annotations

import dataclasses

import ddplab.doctor.records as records
from ddplab.doctor.messages import Crash, Run


@dataclasses.dataclass(frozen=True)
class Ranked:
    """A record and the rank that recorded it."""

    rank: int
    record: records.Record


class Evidence:
    def __init__(self, run: Run, probe=None):
        self.run = run
        self.probe = probe  # a one-rank run stopped at its first step (``lr-not-scaled``)
        self.reference = None  # the one-process run on the same samples (``launch.reference``)
        self.ranks = sorted(run.evidence)
        self.by_rank = dict(run.evidence)  # rank -> messages.RankEvidence
        self.kept = {r: e.records for r, e in run.evidence.items()}
        # a process that failed before it joined a group sends its records with its outcome
        self.before_group = {r: o.records for r, o in run.outcomes.items() if o.records}
        self.world_size = run.world_size
        self.launcher_kept = (run.launcher.records if run.launcher else None) or {}

    def records(self, kind: type[records.Record], rank: int | None = None) -> list:
        """Rank ``rank``'s records of ``kind`` (the lowest reporting rank's by default)."""
        if rank is None:
            rank = self.ranks[0] if self.ranks else None
        if rank not in self.kept:
            return []
        return self.kept[rank].get(kind.KIND, [])

    def per_rank(self, kind: type[records.Record]) -> dict:
        return {rank: self.records(kind, rank) for rank in self.ranks}

    def all(self, kind: type[records.Record]) -> list[Ranked]:
        """Every rank's records of ``kind``, each with its rank."""
        return [Ranked(rank, r) for rank in self.ranks for r in self.records(kind, rank)]

    def recorded_before_group(self, kind: type[records.Record]) -> list[Ranked]:
        """Records of ``kind`` from processes that failed before they joined a group."""
        return [Ranked(rank, r) for rank, kept in sorted(self.before_group.items())
                for r in kept.get(kind.KIND, [])]

    def launcher_records(self, kind: type[records.Record]) -> list:
        """Records of ``kind`` from rank 0's process when it was no rank (a launcher of
        spawned ranks, or a script that never joined a group)."""
        return self.launcher_kept.get(kind.KIND, [])

    def training_passes(self, rank: int | None = None) -> list[records.Pass]:
        return [p for p in self.records(records.Pass, rank) if p.training]

    def loader(self, index: int, rank: int | None = None) -> records.Loader | None:
        return next((d for d in self.records(records.Loader, rank) if d.index == index), None)

    def requested_backend(self) -> str | None:
        inits = self.records(records.GroupInit)
        return inits[0].requested if inits else None

    def used_backend(self) -> str | None:
        inits = self.records(records.GroupInit)
        return inits[0].backend if inits else None

    def mapped(self) -> dict | None:
        """What of the script's CUDA ran on the CPU (``ranks.cuda_on_cpu``): the machine's GPUs
        and ranks, and each thing mapped, in the order first seen, with its first line."""
        machine = next((r for rank in self.ranks
                        for r in self.records(records.CudaOnCpu, rank)), None)
        seen = {}
        for ranked in sorted(self.all(records.Mapped), key=lambda r: (r.rank, r.record.t)):
            call = ranked.record
            seen.setdefault(call.what, {"what": call.what, "file": call.file, "line": call.line})
        if machine is None or not seen:
            return None
        return {"gpus": machine.gpus, "ranks": machine.ranks, "calls": list(seen.values())}

    def writes(self) -> dict:
        """rank -> the files the script would have written there (they went to the run's
        scratch folder), in the order first written."""
        found = {}
        for rank in self.ranks:
            paths = list(dict.fromkeys(w.path for w in self.records(records.Write, rank)
                                       if w.how != "mkdir"))  # files, not their folders
            if paths:
                found[rank] = paths
        return found

    def trackers(self) -> dict | None:
        """The experiment trackers the script imported and the settings that kept them from
        recording a run."""
        found = next((t for rank in self.ranks for t in self.records(records.Trackers, rank)),
                     None)
        return found and {"modules": found.modules, "settings": found.settings}

    def steps_run(self) -> int:
        return min((self.by_rank[r].steps for r in self.ranks), default=0)

    def outcome(self, rank: int) -> records.Outcome | None:
        """How the script ended on ``rank``, if it said."""
        done = self.run.outcomes.get(rank)
        return done.outcome if done else None

    def crashed(self) -> Crash | None:
        """The crash of the first rank (lowest) that failed on its own, else the launcher's."""
        ended = [dataclasses.replace(done.crash, rank=rank)
                 for rank, done in sorted(self.run.outcomes.items()) if done.crash]
        launcher = self.run.launcher
        if launcher and launcher.crash:
            ended.append(launcher.crash)
        return ended[0] if ended else None

    def hung(self) -> bool:
        """A rank's watchdog raised the alarm (not a roll call after a crash)."""
        return bool(self.run.hang and self.run.hang.alarm)
