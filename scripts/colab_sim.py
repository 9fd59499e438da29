"""A Colab session, as closely as this machine allows: a lab installed and run as in Colab.

    python scripts/colab_sim.py [LAB ...] [--python python3] [--torch SPEC] [--keep DIR] [--tests]
                                [--record PATH]

Colab cannot be reached from here. What Colab runs comes from its published package lists
(googlecolab/backend-info, pip-freeze.txt, August 2026): the versions in ``COLAB`` below.
This script

1. makes a fresh venv (no system site packages) with those versions, and torch from this
   machine's CPU wheel (Colab has torch 2.11; no CPU wheel of 2.11 is on this machine, so
   2.13 in CI; ``--torch torch==2.11.0 --python python3.13`` takes PyPI's build, several GB
   with its CUDA libraries, which runs on the CPU: Colab's own Python and torch, for a
   one-off check);
2. builds a wheel of this checkout (``pip wheel --no-deps``), standing in for the
   repository address;
3. runs the lab's own install cell in that venv's Python, as Colab runs it (with
   ``google.colab`` present, the address replaced by the wheel), and checks that it left
   Colab's widgets 7.7.1 in place (ipywidgets 8 breaks Colab's widget front end);
4. copies each lab alone into an empty folder, runs it top to bottom in a real kernel of that
   venv and moves every integer slider one step and back from the kernel
   (``benchmarks/all_sliders.py --installed``): each move runs the panel's observer. A cell
   that raises fails the run;
5. with ``--record PATH``, times the first lab as a reader meets it (:func:`measure`): in a
   fresh kernel of that venv, the lab's cells from ``import ddplab`` to its first slider
   panel, until the panel shows its first figure (the first result), then each slider of that
   panel moved one step and back ``TIMED_MOVES`` times, each move's observer run timed (with
   nothing run ahead or kept, ``DDPLAB_AHEAD=0``, so every move re-runs DDP). It prints them
   and writes them as JSON with the machine (cores, GPUs, its load as the timing started,
   Python, torch, date): the record the running page reads (``ddplab.chapters.running.colab``,
   its file ``src/ddplab/chapters/running/colab_sim.json``). Without it (CI) the lab has run
   and its sliders have moved in step 4 already, and this second run of it is left out;
6. with ``--tests``, runs pytest (tests/ and the labs under nbval) in that venv on this
   checkout's ``src/``, the test tools installed beside Colab's packages.

``make colab-sim-313`` is the one-off run on Colab's Python 3.13 and torch 2.11 (every lab,
``--tests``), its venv kept (``--keep``) and reused, since it downloads 2.7 GB.

Needs the network to PyPI (or its mirror) for the pinned packages. Exits non-zero on any
failure. Python 3.13 (Colab's) works with ``--python`` where a torch wheel for it exists.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLAB = {"ipywidgets": "7.7.1", "widgetsnbextension": "3.6.10", "ipykernel": "6.17.1",
         "jupyter_client": "7.4.9", "matplotlib": "3.10.0", "numpy": "2.1.3",
         "cloudpickle": "3.1.2"}
TORCH = "torch==2.13.0"  # this machine's CPU wheel (pip's find-links); Colab has 2.11
RUNNER = ["nbclient", "nbformat"]  # what drives the kernel here (Colab's own front end there)
COLAB_PSUTIL = "5.9.5"  # Colab's too; only the tests use it (its Process has no net_connections)
TEST_TOOLS = ("pytest", "pytest-xdist", "nbval", "py-spy")  # at requirements-dev.txt's versions
TIMED_MOVES = 6  # per slider of the first panel: three steps forth and three back


def colab_env() -> dict:
    """This environment less ``PYTHONPATH``: Colab's Python has none, and one pointing at a
    checkout's ``src`` would make the venv import ddplab from there, not from the wheel."""
    return {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}


def sh(*command: str, **kwargs) -> subprocess.CompletedProcess:
    print("$", " ".join(command), flush=True)
    kwargs.setdefault("env", colab_env())
    return subprocess.run(command, check=True, **kwargs)


def dev_pins(names) -> list:
    """``requirements-dev.txt``'s lines for ``names`` (``pytest==9.2.0``, ...)."""
    with open(os.path.join(ROOT, "requirements-dev.txt")) as f:
        lines = [line.split("#")[0].strip() for line in f]
    pins = [line for line in lines if re.split(r"[=<>!~ ]", line)[0] in names]
    if len(pins) != len(names):
        raise SystemExit(f"requirements-dev.txt lacks one of {names}")
    return pins


def run_tests(python: str, work: str, torch: str) -> None:
    """The library's tests and the labs under nbval, in the venv, on this checkout's src/:
    the test tools installed beside Colab's packages, which stay as they are."""
    constraints = os.path.join(work, "colab-constraints.txt")
    with open(constraints, "w") as f:
        f.write("".join(f"{name}=={version}\n" for name, version in COLAB.items()) + torch + "\n")
    sh(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", constraints,
       *dev_pins(TEST_TOOLS), f"psutil=={COLAB_PSUTIL}")
    sh(python, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider",
       cwd=ROOT, env={**colab_env(), "PYTHONPATH": os.path.join(ROOT, "src")})


def install_cell(lab: str) -> str:
    """The lab's install cell: its first code cell."""
    cells = json.load(open(lab))["cells"]
    return "".join(next(c for c in cells if c["cell_type"] == "code")["source"])


def as_in_colab(cell: str, wheel: str) -> str:
    """The install cell as Colab runs it: ``google.colab`` imported, and the repository
    address (``git+https://...``) replaced by the wheel built from this checkout."""
    address = re.search(r"git\+https://[^\"' ]+", cell)
    if address is None:
        raise SystemExit("the install cell names no git+https:// address")
    return ("import sys, types\nsys.modules['google.colab'] = types.ModuleType('google.colab')\n"
            + cell.replace(address.group(0), "file://" + wheel))


def measure(lab: str, moves: int) -> dict:
    """Runs in the venv's Python (``--measure``): ``lab`` in a fresh kernel of that venv, up to
    its first slider panel, and that panel's sliders moved. The install cell runs first, as
    in Colab, outside the clock (in this kernel it installs nothing: ``google.colab`` is
    absent, and the package is in place already); the first result is the time from the next
    cell to the end of the first panel's cell, which draws the panel's first figure before it
    returns (``screen.widgets.explore``). Each move sets a slider from the kernel, which runs
    the panel's observer, the real run and the draw (``benchmarks/lab_kernel.py``)."""
    import nbformat

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from lab_kernel import KERNEL_CODE, Kernel, close, lab_folder

    cells = [c.source for c in nbformat.read(lab, as_version=4).cells if c.cell_type == "code"]
    panel = next(i for i, source in enumerate(cells) if "widgets.explore(" in source)
    load = os.getloadavg()[0]  # the machine's 1-minute load as the timing starts
    kernel = Kernel(lab_folder(lab), ahead=False)  # every move runs: nothing kept or ahead
    try:
        kernel.run(cells[0])
        start = time.perf_counter()
        for source in cells[1:panel + 1]:
            kernel.run(source)
        first_result = time.perf_counter() - start
        out = kernel.run(KERNEL_CODE)
        names = json.loads(out[out.index("BENCH") + 5:].splitlines()[0])
        sliders = []
        for i, name in enumerate(names):
            timed = [kernel.move(i, k) for k in range(moves)]
            sliders.append({"slider": name.split(" ", 2)[2],
                            "moves_ms": [round(ms, 1) for ms, _, _ in timed],
                            "run_ms": [split[0] for _, split, _ in timed if split],
                            "draw_ms": [split[1] for _, split, _ in timed if split]})
    finally:
        close([kernel])
    return {"load_average": round(load, 2), "first_result_s": round(first_result, 2),
            "first_result_cells": panel, "sliders": sliders}


def record(lab: str, versions: dict, install_cell_s: float, timing: dict) -> dict:
    """What ``--record`` writes: the machine (with its load as the timing started), the lab,
    the install cell's time and :func:`measure`'s."""
    timing = dict(timing)
    return {"schema_version": 1,
            "measured_by": "scripts/colab_sim.py --record (the Colab simulation)",
            "machine": {"cores": len(os.sched_getaffinity(0)), "gpus": versions["gpus"],
                        "python": versions["python"], "torch": versions["torch"],
                        "ipywidgets": versions["ipywidgets"],
                        "load_average": timing.pop("load_average"),
                        "date": time.strftime("%Y-%m-%d", time.gmtime())},
            "lab": os.path.relpath(lab, ROOT), "install_cell_s": round(install_cell_s, 2),
            **timing}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labs", nargs="*", default=[f"{ROOT}/labs/01_averaging.ipynb"])
    parser.add_argument("--python", default="python3", help="the Python of the fresh venv")
    parser.add_argument("--torch", default=TORCH, help=f"what pip installs (default {TORCH})")
    parser.add_argument("--keep", help="make the venv here and leave it, or reuse the one a "
                        "last --keep left there (default: a temp dir)")
    parser.add_argument("--moves", type=int, default=2)
    parser.add_argument("--tests", action="store_true",
                        help="then the tests and labs (pytest) in that venv, on this checkout")
    parser.add_argument("--record", metavar="PATH",
                        help="write the first lab's timings, with the machine, as JSON here")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)  # in the venv
    args = parser.parse_args()
    if args.measure:  # the venv's Python, called by the steps below
        print("MEASURED" + json.dumps(measure(os.path.abspath(args.labs[0]), args.moves)))
        return
    args.labs = [os.path.abspath(lab) for lab in args.labs]  # the labs run from another folder
    # ipykernel 6's debugger warns on every start about frozen modules: noise here.
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    start = time.perf_counter()
    work = args.keep or tempfile.mkdtemp(prefix="ddplab-colab-")
    venv = os.path.join(work, "venv")
    python = os.path.join(venv, "bin", "python")
    try:
        if os.path.exists(python):  # a kept venv: reused, its packages checked by pip below
            print(f"reusing {venv}", flush=True)
        else:
            sh(args.python, "-m", "venv", venv)
        pins = [f"{name}=={version}" for name, version in COLAB.items()]
        sh(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *pins, args.torch,
           *RUNNER)
        # The checkout's build inputs only: a build in place would leave build/ behind.
        source, wheels = os.path.join(work, "source"), os.path.join(work, "wheel")
        for folder in (source, wheels):  # a kept venv's last checkout and wheel: gone
            shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(source)
        for name in ("pyproject.toml", "README.md", "requirements.txt"):
            shutil.copy(os.path.join(ROOT, name), source)
        shutil.copytree(os.path.join(ROOT, "src"), os.path.join(source, "src"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        sh(python, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
           source, "-w", wheels)
        wheel = os.path.join(wheels, os.listdir(wheels)[0])
        # A kept venv holds the last ddplab 0.1.0, which pip would take as already installed.
        sh(python, "-m", "pip", "uninstall", "-q", "-y", "ddplab")
        installing = time.perf_counter()
        sh(python, "-c", as_in_colab(install_cell(args.labs[0]), wheel))
        install_cell_s = time.perf_counter() - installing
        report = (f"import json, importlib.metadata as m, sys, ddplab, torch\n"
                  f"names = {[*COLAB, 'torch']!r}\n"
                  "print(json.dumps({**{n: m.version(n) for n in names}, "
                  "'python': sys.version.split()[0], 'ddplab': ddplab.__file__, "
                  "'gpus': torch.cuda.device_count()}))")
        versions = json.loads(subprocess.run([python, "-c", report], check=True, env=colab_env(),
                                             capture_output=True, text=True, cwd=work).stdout)
        print("in the venv:", versions)
        changed = {n: versions[n] for n, v in COLAB.items() if versions[n] != v}
        if changed:
            raise SystemExit(f"the install cell changed Colab's packages: {changed}")
        if not versions["ddplab"].startswith(venv):
            raise SystemExit(f"ddplab imported from {versions['ddplab']}, not the wheel")
        sh(python, "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3")
        sh(python, os.path.join(ROOT, "benchmarks", "all_sliders.py"), "--installed",
           "--moves", str(args.moves), *args.labs, cwd=work)
        if args.record:
            print(f"$ {python} {__file__} --measure --moves {TIMED_MOVES} {args.labs[0]}",
                  flush=True)
            out = subprocess.run([python, os.path.abspath(__file__), "--measure", "--moves",
                                  str(TIMED_MOVES), args.labs[0]], check=True, env=colab_env(),
                                 stdout=subprocess.PIPE, text=True, cwd=work).stdout
            timing = json.loads(out[out.index("MEASURED") + 8:].splitlines()[0])
            print(f"{os.path.basename(args.labs[0])}: first result {timing['first_result_s']} "
                  "s after the install cell; slider moves (ms): "
                  + "; ".join(f"{s['slider']} {s['moves_ms']}" for s in timing["sliders"]))
            with open(args.record, "w") as f:
                json.dump(record(args.labs[0], versions, install_cell_s, timing), f, indent=1)
                f.write("\n")
            print(f"recorded in {args.record}")
        if args.tests:
            run_tests(python, work, args.torch)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    names = ", ".join(os.path.basename(lab) for lab in args.labs)
    tests = " (then the tests passed there)" if args.tests else ""
    print(f"colab-sim: {names} installed, run and its sliders moved{tests} with Python "
          f"{versions['python']}, torch {versions['torch']} and Colab's widgets "
          f"{COLAB['ipywidgets']}, in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
