"""What does shipping a rank function by value cost a warm call? A cell's function against a
module's, and a module's function against the way it was sent before cloudpickle.

    python benchmarks/shipping.py [--world-size 2] [--repeats 40]

One tiny DDP step (``chapters.running.first_group.ddp_step``) is called on the warm shared pool
three ways, interleaved call by call so that the machine's load falls on all three alike:

* module: ``ddplab.run(first_group.ddp_step, W)``, the function pickled by reference (its name);
* cell: the same source run as a notebook cell runs it (a namespace named ``__main__``), so
  ``ddplab.run`` ships the function by value with the globals it uses (``make_model``,
  ``make_batch``, ``DDP``, ``F``...);
* before: ``pool.shared().run(ddp_step, ...)`` with the function itself in the message, as every
  call was sent before functions were shipped with cloudpickle (plain ``pickle`` of the message,
  once per rank).

It prints the median per call and the ratios cell / module and module / before, all measured in
this process, and what pickling alone costs per call (microseconds). Most of the by-value cost
is cloudpickle's ``_find_imported_submodules`` (``cloudpickle/cloudpickle.py``, 3.1.2), which
scans ``sys.modules`` (thousands of entries once torch is imported) for every function pickled
by value that uses a module global; the payload is pickled anew on every call, so a cell run
again is seen at once.
"""

from __future__ import annotations

import argparse
import inspect
import pickle
import statistics
import time

import cloudpickle

import ddplab
from ddplab.chapters.running import first_group
from ddplab.engine import cluster, messages, pool


def cell_copy():
    """``first_group.ddp_step`` as if a reader had pasted its module into a notebook cell."""
    namespace = {"__name__": "__main__"}
    exec(compile(inspect.getsource(first_group), "<cell>", "exec"), namespace)
    return namespace["ddp_step"]


def median_us(fn, repeats=2000) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--world-size", type=int, default=2)
    cli.add_argument("--repeats", type=int, default=40)
    args = cli.parse_args()
    world_size, module_fn, cell_fn = args.world_size, first_group.ddp_step, cell_copy()
    assert cell_fn.__module__ == "__main__"
    ddplab.placed(backend="gloo", device="cpu")  # every call here, for the process
    where, timeout = ddplab.placement(), cluster.DEFAULT_TIMEOUT

    def before():
        cluster.check_call(module_fn, world_size, timeout, {})
        pickle.dumps({})  # the old check pickled the parameters once
        return pool.shared().run(module_fn, world_size, where, timeout, {})

    ways = {"module": lambda: ddplab.run(module_fn, world_size),
            "cell": lambda: ddplab.run(cell_fn, world_size),
            "before": before}
    results = {name: way() for name, way in ways.items()}  # warm up; the group forms once
    assert repr(results["module"]) == repr(results["cell"]) == repr(results["before"])
    times = {name: [] for name in ways}
    for _ in range(args.repeats):
        for name, way in ways.items():
            start = time.perf_counter()
            way()
            times[name].append(time.perf_counter() - start)
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    print(f"warm ddplab.run of one DDP step, world size {world_size}, median of "
          f"{args.repeats} interleaved calls (2 cores, shared):")
    for name in ways:
        print(f"  {name:<7} {med[name]:7.2f} ms")
    print(f"  cell / module   = {med['cell'] / med['module']:.3f}")
    print(f"  module / before = {med['module'] / med['before']:.3f}")
    run = messages.Run(1, world_size, timeout, module_fn, {})
    pickling = {"before (pickle of the message, per rank)": lambda: pickle.dumps(run),
                "module (cloudpickle, by reference)": lambda: cluster.ship(module_fn, {}),
                "cell (cloudpickle, by value)": lambda: cluster.ship(cell_fn, {})}
    print("pickling alone, per call (median of 2000):")
    for name, way in pickling.items():
        print(f"  {name:<42} {median_us(way):8.1f} us")
    print(f"  by-value payload: {len(cloudpickle.dumps(cell_fn))} bytes; by reference: "
          f"{len(cloudpickle.dumps(module_fn))} bytes")


if __name__ == "__main__":
    main()
