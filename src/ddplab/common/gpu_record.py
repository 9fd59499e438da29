"""Measurements made on a GPU, kept as records the book and the cost model read.

A record is a JSON file in ``ddplab/common/gpu_records/`` (installed with the package): the
machine it was measured on (GPU, driver, torch, CUDA, date, and who or what measured it), a
memory measurement with the CUDA allocator, and training throughput of GPT-2-shaped models as
step times and model FLOPs utilisation. ``benchmarks/gpu.py`` writes records of this schema on
whatever GPU it runs on; ``h100-2026-11-25.json`` holds the figures of one H100 run reported to
the project (not made by that script); ``h200-2026-11-26.json`` is ``benchmarks/gpu.py``'s own
run on one H200 (its memory rows are known wrong: see its ``memory.note``);
``h200-2026-11-28.json`` is that script's run at 124 M, eager, after the count was fixed: its
memory rows are the ones the memory page reads. ``load()`` without a name gives the newest
record by date.

Model FLOPs utilisation (MFU) is ``6 x params x tokens/s / peak``: 6 FLOPs per parameter and
token for forward and backward (Kaplan et al. 2020, section 2.1), attention's own FLOPs left
out, as PaLM's definition (Chowdhery et al. 2022, appendix B) counts them separately.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

RECORDS = Path(__file__).with_name("gpu_records")
SCHEMA_VERSION = 1
MODES = ("eager", "compiled")
_MACHINE_KEYS = ("gpu", "driver", "torch", "cuda", "date", "measured_by")
_ROW_KEYS = ("model", "params", "batch_size", "mode", "step_ms", "mfu_percent")


def mfu_percent(params: float, tokens_per_step: float, step_s: float, peak_flops: float):
    """Model FLOPs utilisation, in percent: ``6 x params x tokens/s / peak``."""
    return 100 * 6 * params * tokens_per_step / step_s / peak_flops


@dataclasses.dataclass(frozen=True)
class GpuRecord:
    name: str  # the file's stem
    data: dict

    @property
    def machine(self) -> dict:
        return self.data["machine"]

    @property
    def rows(self) -> list[dict]:
        """Throughput rows: model, params, batch_size, mode, step_ms, mfu_percent."""
        return self.data["throughput"]["rows"]

    def points(self, mode: str) -> list[tuple[float, float]]:
        """``(params, MFU as a fraction)`` of every model measured in ``mode``, by size (a
        size that was skipped, out of memory, has no MFU)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        return sorted((r["params"], r["mfu_percent"] / 100) for r in self.rows
                      if r["mode"] == mode and r["mfu_percent"] is not None)

    def mfu_from_step(self, row: dict) -> float:
        """The row's MFU, in percent, worked out again from its step time."""
        tokens = row["batch_size"] * row.get("seq_len", self.data["throughput"]["seq_len"])
        return mfu_percent(row["params"], tokens, row["step_ms"] / 1e3, self.data["peak_flops"])

    @property
    def origin(self) -> str:
        """Where the numbers come from, in a few words."""
        m = self.machine
        count = m.get("gpu_count", 1)
        return (f"measured on {'one' if count == 1 else count} {m['gpu']}, {m['date']}, "
                f"{m['measured_by']}")


def validate(data: dict) -> dict:
    """``data`` if it has the schema's keys, else a ValueError naming what is missing."""
    missing = [k for k in ("schema_version", "machine", "peak_flops", "memory", "throughput")
               if k not in data]
    missing += [f"machine.{k}" for k in _MACHINE_KEYS if k not in data.get("machine", {})]
    for i, row in enumerate(data.get("throughput", {}).get("rows", [])):
        missing += [f"throughput.rows[{i}].{k}" for k in _ROW_KEYS if k not in row]
    if "throughput" in data and "seq_len" not in data["throughput"]:
        missing.append("throughput.seq_len")
    if missing:
        raise ValueError(f"a GPU record needs {', '.join(missing)}")
    if data["schema_version"] != SCHEMA_VERSION:
        raise ValueError(f"GPU record schema {data['schema_version']!r}, this ddplab reads "
                         f"{SCHEMA_VERSION}")
    return data


def names() -> list[str]:
    return sorted(p.stem for p in RECORDS.glob("*.json"))


def load(name: str | None = None) -> GpuRecord:
    """The record ``name`` (a file stem in ``RECORDS``), or the newest by date."""
    if name is None:
        records = [load(n) for n in names()]
        if not records:
            raise FileNotFoundError(f"no GPU record in {RECORDS}")
        return max(records, key=lambda r: (r.machine["date"], r.name))
    if name not in names():
        raise ValueError(f"no GPU record {name!r}; there are: {', '.join(names())}")
    return GpuRecord(name, validate(json.loads((RECORDS / f"{name}.json").read_text())))
