"""Measure on this machine's GPU what the book records from one H100, and write a record of it.

    python benchmarks/gpu.py [--quick] [--sizes 124M,355M,1.3B] [--steps 10] [--out FILE]
    python benchmarks/gpu.py --cpu-smoke --out /tmp/smoke.json  # the same code, tiny, on CPU

Two measurements, on one GPU (``cuda:0``), in this process:

- **memory**: DDP at world size 1 (NCCL) of 4 x ``Linear(4096, 4096)`` (67,125,248 parameters),
  Adam in fp32, after 3 steps, by the CUDA caching allocator (``memory_allocated``, and the
  peak of the last ``optimizer.step()``), with and without ``gradient_as_bucket_view``, and
  with ``fused=True``; beside the memory calculator's bytes;
- **throughput**: GPT-2-shaped models (``ddplab.common.gpt``: 124 M, 355 M and 1.3 B
  parameters; a size that does not fit is recorded as skipped), sequences of 1024 tokens,
  bf16 autocast, ``AdamW(fused=True)``, eager and under ``torch.compile``; the median step
  time by CUDA events, and model FLOPs utilisation, 6 x params x tokens/s / the GPU's dense
  BF16 peak (``PEAK_FLOPS``, or ``--peak-tflops``).

The record (``ddplab.common.gpu_record``'s schema: GPU, driver, torch, CUDA, date) goes to
``--out`` (default ``_build/gpu/<gpu>-<date>.json``). Copy it into
``src/ddplab/common/gpu_records/`` for the book and the cost model to read it. Without a CUDA
GPU the script says so and exits 0; ``--cpu-smoke`` runs the same code on the CPU with tiny
shapes (gloo, malloc's count, ``torch.compile`` with ``--compile-backend``), for the tests.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddplab.chapters.memory import allocator_count, calculator
from ddplab.common import gpt, gpu_record
from ddplab.report.stages.machine import nccl_version

# Dense BF16 tensor-core peaks, by a piece of torch.cuda.get_device_name() (NVIDIA datasheets:
# H100 SXM 989.4, H100 NVL 835, H100 PCIe 756, H200 989, A100 312, L4 121 TFLOP/s; the
# datasheets' larger figures are with 2:4 sparsity). "H100 80GB HBM3" is the SXM board.
PEAK_FLOPS = (("H100 80GB HBM3", 989e12), ("H100 SXM", 989e12), ("H100 NVL", 835e12),
              ("H100 PCIe", 756e12), ("H200", 989e12), ("A100", 312e12), ("L4", 121e12))
BATCH_SIZE = {"124M": 16, "355M": 16, "1.3B": 8, "tiny": 4, "small": 8}  # sequences per step
MEMORY_WIDTH = {"full": 4096, "quick": 1024, "smoke": 64}  # 4 x Linear(width, width)
MEMORY_STEPS = 3
MiB = 2 ** 20
# what torch.optim.Adam picks when told neither foreach nor fused (adam.py, torch 2.13, line 938:
# foreach where every parameter is on a device with foreach kernels, which the CPU is not)
DEFAULT_ADAM = {True: "default: foreach", False: "default: for-loop"}


def machine(device, measured_by: str) -> dict:
    cuda = device.type == "cuda"
    cpu = f"CPU ({platform.processor() or platform.machine()})"
    return {"gpu": torch.cuda.get_device_name(device) if cuda else cpu,
            "gpu_count": torch.cuda.device_count() if cuda else 0,
            "driver": _driver() if cuda else None, "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "nccl": nccl_version() if cuda else None,
            "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
            "measured_by": measured_by}


def _driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return out.splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def peak_flops(name: str, given_tflops: float | None) -> float | None:
    if given_tflops is not None:
        return given_tflops * 1e12
    return next((peak for piece, peak in PEAK_FLOPS if piece in name), None)


# ---------------------------------------------------------------- memory


def measure_memory(device, width: int) -> dict:
    """DDP at world size 1, Adam, fp32: the allocator's bytes after the steps, by variant."""
    params, tensors = 4 * (width * width + width), 8
    rows = []
    for bucket_view, fused in ((False, False), (True, False), (True, True)):
        def build_and_train(watch, bucket_view=bucket_view, fused=fused):
            torch.manual_seed(0)
            model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(4)))
            ddp = DDP(model.to(device), gradient_as_bucket_view=bucket_view)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=fused or None)
            watch.attach(optimizer)
            X = torch.randn(8, width, device=device)
            for _ in range(MEMORY_STEPS):
                optimizer.zero_grad(set_to_none=False)
                ddp(X).square().mean().backward()
                optimizer.step()
            return ddp, optimizer  # alive until counted

        kept, counted = allocator_count.held_after(build_and_train, device)
        predicted = calculator.bytes_per_rank(params, "adam", "ddp", 1, bucket_view=bucket_view,
                                              tensors=tensors)
        mib = (lambda b: None if b is None else round(b / MiB, 2))
        rows.append({"bucket_view": bucket_view,
                     "adam": "fused" if fused else DEFAULT_ADAM[device.type == "cuda"],
                     "allocated_mib": mib(counted.allocated),
                     "calculator_mib": mib(sum(predicted.values())),
                     "peak_mib": mib(counted.peak), "step_peak_mib": mib(counted.step_peak),
                     "step_peak_bytes_per_param": None if counted.step_peak is None
                     else round(counted.step_peak / params, 3)})
        del kept
    return {"model": f"4 x Linear({width}, {width})", "params": params,
            "parameter_tensors": tensors, "strategy": "ddp", "world_size": 1,
            "backend": dist.get_backend(), "optimizer": "adam", "dtype": "float32",
            "steps": MEMORY_STEPS, "allocator": counted.allocator,
            "how": "allocator_count.held_after (ddplab.chapters.memory)", "rows": rows}


# ---------------------------------------------------------------- throughput


def seconds(step, device) -> float:
    """One call of ``step``, by CUDA events on a GPU (host clocks see launches, not kernels)."""
    if device.type != "cuda":
        start = time.perf_counter()
        step()
        return time.perf_counter() - start
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def median_step_seconds(shape, batch_size, device, compiled, compile_backend, steps, warmup):
    torch.manual_seed(0)
    model = gpt.GPT(shape).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    forward = torch.compile(model, backend=compile_backend) if compiled else model
    X, Y = gpt.random_batch(shape, batch_size, device)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = forward(X, Y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(warmup):  # torch.compile compiles during the first calls
        step()
    return statistics.median(seconds(step, device) for _ in range(steps))


def measure_throughput(device, sizes, modes, peak, steps, warmup, compile_backend) -> list:
    rows = []
    for name in sizes:
        shape = {**gpt.SHAPES, **gpt.QUICK_SHAPES}[name]
        for mode in modes:
            row = {"model": name, "layers": shape.layers, "width": shape.width,
                   "heads": shape.heads, "seq_len": shape.seq_len, "params": shape.params,
                   "batch_size": BATCH_SIZE[name], "mode": mode, "step_ms": None,
                   "mfu_percent": None}
            try:
                s = median_step_seconds(shape, BATCH_SIZE[name], device, mode == "compiled",
                                        compile_backend, steps, warmup)
                row["step_ms"] = round(1e3 * s, 2)
                row["tokens_per_s"] = round(BATCH_SIZE[name] * shape.seq_len / s)
                if peak:
                    row["mfu_percent"] = round(gpu_record.mfu_percent(
                        shape.params, BATCH_SIZE[name] * shape.seq_len, s, peak), 2)
            except torch.cuda.OutOfMemoryError as error:  # "if memory allows"
                row["skipped"] = f"out of memory: {str(error).splitlines()[0]}"
            rows.append(row)
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            print(f"{name:>6} {mode:>8}: " + (f"{row['step_ms']} ms, MFU {row['mfu_percent']}%"
                                              if row["step_ms"] else row["skipped"]), flush=True)
    return rows


# ---------------------------------------------------------------- the record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few steps")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="the same code on the CPU, tiny shapes (a test, not a measurement)")
    parser.add_argument("--sizes", help="comma-separated, of " + ", ".join(
        [*gpt.SHAPES, *gpt.QUICK_SHAPES]))
    parser.add_argument("--steps", type=int, default=10, help="timed steps per model")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--peak-tflops", type=float, help="the GPU's dense BF16 peak")
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--skip-compiled", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("no CUDA GPU here: nothing measured (--cpu-smoke runs the same code on the CPU)")
        return 0
    sizes = (args.sizes.split(",") if args.sizes else ["tiny"] if args.cpu_smoke
             else ["tiny", "small"] if args.quick else list(gpt.SHAPES))
    unknown = [s for s in sizes if s not in {**gpt.SHAPES, **gpt.QUICK_SHAPES}]
    if unknown or args.steps < 1 or args.warmup < 0:
        parser.error(f"unknown sizes {unknown}" if unknown else "--steps >= 1, --warmup >= 0")
    device = torch.device("cpu") if args.cpu_smoke else torch.device("cuda", 0)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=dist.HashStore(),
                            rank=0, world_size=1)
    try:
        info = machine(device, "benchmarks/gpu.py" + (" --cpu-smoke" if args.cpu_smoke else ""))
        peak = peak_flops(info["gpu"], args.peak_tflops)
        width = MEMORY_WIDTH["smoke" if args.cpu_smoke else "quick" if args.quick else "full"]
        memory = measure_memory(device, width)
        for row in memory["rows"]:
            print(f"memory, bucket view {row['bucket_view']}, adam {row['adam']}: "
                  f"{row['allocated_mib']} MiB ({memory['allocator']}), calculator "
                  f"{row['calculator_mib']}; step peak {row['step_peak_mib']} MiB", flush=True)
        modes = ("eager",) if args.skip_compiled else gpu_record.MODES
        rows = measure_throughput(device, sizes, modes, peak, args.steps, args.warmup,
                                  args.compile_backend)
    finally:
        dist.destroy_process_group()
    record = gpu_record.validate({
        "schema_version": gpu_record.SCHEMA_VERSION, "machine": info, "peak_flops": peak,
        "peak_flops_source": "--peak-tflops" if args.peak_tflops else
        "benchmarks/gpu.py PEAK_FLOPS (NVIDIA datasheet, dense BF16)" if peak else None,
        "memory": memory,
        "throughput": {"seq_len": max(r["seq_len"] for r in rows), "autocast": "bfloat16",
                       "optimizer": "AdamW(fused=True)", "timer": "CUDA events"
                       if device.type == "cuda" else "time.perf_counter",
                       "compile_backend": args.compile_backend,
                       "mfu": "6 x params x tokens/s / peak_flops", "rows": rows}})
    slug = "".join(c if c.isalnum() else "-" for c in info["gpu"].lower()).strip("-")
    out = args.out or Path("_build/gpu") / f"{slug}-{info['date']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"record written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
