"""A lab in Colab: how long lab 1 takes there, as recorded in the Colab simulation, and where a
lab's ranks run on a Colab runtime with one GPU.

Colab itself cannot be reached from the machine that builds the book. ``scripts/colab_sim.py
--record`` runs lab 1 in a fresh venv with Colab's package versions (its widgets, kernel,
matplotlib and numpy) and writes what it timed to ``colab_sim.json`` beside this module: the
machine (cores, GPUs, its load average as the timing started, Python, torch, date), the
install cell's time, the first result (from the cell after the install cell to the first
panel's first figure) and each move of that panel's sliders (every move re-runs DDP: nothing
run ahead or kept). :func:`load` reads it
back and :meth:`ColabTiming.describe` prints it, named as the recorded measurement it is.

:func:`on_one_gpu` asks the placement's own rules (``engine.placement``) what a lab's
``ddplab.placed(...)`` line gives on one GPU, with and without the change for a GPU runtime.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import textwrap
from pathlib import Path

from ddplab.engine import placement

RECORD = Path(__file__).with_name("colab_sim.json")
MACHINE_KEYS = ("cores", "gpus", "load_average", "python", "torch", "ipywidgets", "date")
KEYS = ("schema_version", "measured_by", "machine", "lab", "install_cell_s", "first_result_s",
        "first_result_cells", "sliders")
SLIDER_KEYS = ("slider", "moves_ms", "run_ms", "draw_ms")


def validate(data: dict) -> dict:
    """``data`` if it has every field of the record, else a ValueError naming those missing."""
    missing = [k for k in KEYS if k not in data]
    missing += [f"machine.{k}" for k in MACHINE_KEYS if k not in data.get("machine", {})]
    for i, slider in enumerate(data.get("sliders", [])):
        missing += [f"sliders[{i}].{k}" for k in SLIDER_KEYS if k not in slider]
    if not data.get("sliders"):
        missing.append("sliders (none)")
    if missing:
        raise ValueError(f"the Colab simulation's record lacks {', '.join(missing)}")
    return data


@dataclasses.dataclass(frozen=True)
class ColabTiming:
    """One run of ``scripts/colab_sim.py --record``."""

    data: dict

    @property
    def machine(self) -> dict:
        return self.data["machine"]

    def origin(self) -> str:
        """What measured it, where and when, in a sentence."""
        m = self.machine
        gpus = "no GPU" if m["gpus"] == 0 else f"{m['gpus']} GPU(s), not used by these runs"
        return (f"Recorded {m['date']} in the Colab simulation (scripts/colab_sim.py): Colab's "
                f"ipywidgets {m['ipywidgets']}, kernel, matplotlib and numpy in a fresh venv, "
                f"with Python {m['python']} and torch {m['torch']} (not Colab's own), on a "
                f"{m['cores']}-core CPU machine with {gpus} (load average "
                f"{m['load_average']:.1f} as it started).")

    def describe(self) -> str:
        d = self.data
        lines = textwrap.wrap(self.origin(), 96)
        lines += [f"{d['lab']}:",
                  f"  install cell      {d['install_cell_s']:5.1f} s   from a wheel on disk (in "
                  f"Colab, pip first fetches ddplab from GitHub)",
                  f"  first result      {d['first_result_s']:5.1f} s   the next "
                  f"{d['first_result_cells']} cells, to the first panel's figure"]
        for slider in d["sliders"]:
            moves = slider["moves_ms"]
            lines.append(f"  move {slider['slider']:<12} {statistics.median(moves):5.0f} ms  "
                         f"median of {len(moves)} moves, each a real DDP run; slowest "
                         f"{max(moves):.0f} ms")
        return "\n".join(lines)


def load(path: Path | str = RECORD) -> ColabTiming:
    """The record at ``path`` (the one beside this module by default), checked."""
    return ColabTiming(validate(json.loads(Path(path).read_text())))


@dataclasses.dataclass(frozen=True)
class OneGpu:
    """What a lab's placement line gives on a machine with one GPU."""

    largest_world_size: int
    as_is: placement.Placement  # ddplab.placed(largest_world_size=N)
    on_the_gpu: placement.Placement  # ddplab.placed(backend="gloo", device="cuda", ...)
    nccl_refused: str  # the ValueError of NCCL with 2 ranks and 1 GPU

    def describe(self) -> str:
        n = self.largest_world_size
        lines = [f"On one GPU, a lab of up to {n} ranks:",
                 f"  ddplab.placed(largest_world_size={n})",
                 f"      -> {self.as_is}: every rank on the CPU",
                 f'  ddplab.placed(backend="gloo", device="cuda", largest_world_size={n})',
                 f"      -> {self.on_the_gpu}: every rank's tensors on cuda:0",
                 f'  ddplab.placed(backend="nccl", largest_world_size={n}), then a run of 2 ranks',
                 "      -> ValueError, before any rank starts:"]
        lines += textwrap.wrap(self.nccl_refused, 90, initial_indent="         ",
                               subsequent_indent="         ")
        return "\n".join(lines)


def on_one_gpu(largest_world_size: int) -> OneGpu:
    """Ask ``engine.placement`` what a lab of up to ``largest_world_size`` ranks gets on one
    GPU (the count given to its rules, whatever this machine has; the environment's
    ``DDPLAB_BACKEND`` and ``DDPLAB_DEVICE`` left out)."""
    as_is = placement.resolve(ranks=largest_world_size, gpus=1, environ={})
    on_the_gpu = placement.resolve("gloo", "cuda", ranks=largest_world_size, gpus=1, environ={})
    nccl = placement.resolve("nccl", ranks=largest_world_size, gpus=1, environ={})
    try:
        placement.check(nccl, 2, gpus=1)
    except ValueError as exc:
        refused = str(exc)
    else:
        raise AssertionError("NCCL was allowed 2 ranks on one GPU")
    return OneGpu(largest_world_size, as_is, on_the_gpu, refused)
