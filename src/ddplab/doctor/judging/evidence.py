"""The ranks' reports, read for the checks: records by kind and rank, and a few questions
every check asks (which passes trained, which collectives a group saw)."""

from __future__ import annotations


class Evidence:
    def __init__(self, run, probe=None):
        self.run = run
        self.probe = probe  # a one-rank run stopped at its first step (``lr-not-scaled``)
        self.ranks = sorted(int(r) for r in run.evidence)
        self.by_rank = {int(r): e for r, e in run.evidence.items()}
        self.world_size = run.world_size

    def records(self, kind: str, rank: int | None = None) -> list:
        """Rank ``rank``'s records of ``kind`` (the lowest reporting rank's by default)."""
        if rank is None:
            rank = self.ranks[0] if self.ranks else None
        if rank not in self.by_rank:
            return []
        return self.by_rank[rank]["records"].get(kind, [])

    def per_rank(self, kind: str) -> dict:
        return {rank: self.records(kind, rank) for rank in self.ranks}

    def all(self, kind: str) -> list:
        return [dict(r, rank=rank) for rank in self.ranks for r in self.records(kind, rank)]

    def training_passes(self, rank: int | None = None) -> list:
        return [p for p in self.records("pass", rank) if p["training"]]

    def loader(self, index: int, rank: int | None = None) -> dict | None:
        return next((d for d in self.records("loader", rank) if d["index"] == index), None)

    def requested_backend(self) -> str | None:
        inits = [g for g in self.records("group") if g["kind"] == "init"]
        return inits[0]["requested"] if inits else None

    def used_backend(self) -> str | None:
        inits = [g for g in self.records("group") if g["kind"] == "init"]
        return inits[0]["backend"] if inits else None

    def mapped(self) -> dict | None:
        """What of the script's CUDA ran on the CPU (``ranks.cuda_on_cpu``): the machine's GPUs
        and ranks, and each thing mapped, in the order first seen, with its first line."""
        machine = next((r for rank in self.ranks for r in self.records("cuda_on_cpu", rank)),
                       None)
        seen = {}
        for record in sorted(self.all("mapped"), key=lambda r: (r["rank"], r["t"])):
            seen.setdefault(record["what"], {"what": record["what"], "file": record["file"],
                                             "line": record["line"]})
        if machine is None or not seen:
            return None
        return {"gpus": machine["gpus"], "ranks": machine["ranks"], "calls": list(seen.values())}

    def writes(self) -> dict:
        """rank -> the files the script would have written there (they went to the run's
        scratch folder), in the order first written."""
        found = {}
        for rank in self.ranks:
            paths = list(dict.fromkeys(w["path"] for w in self.records("write", rank)))
            if paths:
                found[rank] = paths
        return found

    def trackers(self) -> dict | None:
        """The experiment trackers the script imported and the settings that kept them from
        recording a run."""
        return next((t for rank in self.ranks for t in self.records("trackers", rank)), None)

    def steps_run(self) -> int:
        return min((self.by_rank[r]["steps"] for r in self.ranks), default=0)

    def crashed(self) -> dict | None:
        """The first rank (lowest) that failed on its own, with its traceback."""
        for rank in sorted(self.run.outcomes):
            done = self.run.outcomes[rank]
            if done["outcome"] == "crashed":
                return {"rank": rank, "error": done.get("error"),
                        "traceback": done.get("traceback")}
        launcher = self.run.launcher
        if launcher and launcher["outcome"] == "crashed":
            return {"rank": None, "error": launcher.get("error"),
                    "traceback": launcher.get("traceback")}
        return None

    def hung(self) -> bool:
        """A rank's watchdog raised the alarm (not a roll call after a crash)."""
        return bool(self.run.hang and self.run.hang.get("alarm"))
