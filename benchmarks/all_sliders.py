"""Every integer slider of every lab, moved in a real kernel: what each move costs.

    python benchmarks/all_sliders.py [labs/01_averaging.ipynb ...] [--moves 4]
                                     [--baseline REV] [--profile N]

Each lab runs top to bottom in a real kernel (this venv's ``python3``), from a folder that
holds only that notebook. Then every ``IntSlider`` the kernel holds (found by walking
ipywidgets' live widget objects, so no cell index is named here) is moved one step and back,
``--moves`` times in all, from the kernel: setting ``value`` runs the panel's own observer,
the real run and the draw, as a person's move does (less the trip to the page, which
``scripts/lab_in_browser.py`` times). It prints each slider's median move in ms, with the
run/draw split its panel reports, and the share of sliders at or under 150 ms.

After each lab it prints that lab's share of sliders within the goal (and, with a baseline,
the baseline's), then the share over every lab.

``--baseline REV`` runs a second kernel on ``src/`` as of git revision REV and moves its
sliders alternately with this checkout's, move by move, so that both see the same load on a
shared machine: the ratio column is baseline over now. ``--profile N`` profiles N moves of
each slider with cProfile in the kernel and prints where the time went.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import tempfile

import nbformat
from jupyter_client import KernelManager

LIMIT_MS = 150
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs in the kernel, after the lab: works with ipywidgets 7 (Colab) and 8.
KERNEL_CODE = r'''
def _bench_setup():
    import re, statistics, time, ipywidgets
    from ipywidgets.widgets import widget as _w
    instances = getattr(_w, "_instances", None) or ipywidgets.Widget.widgets
    live = list(instances.values())
    boxes = [b for b in live if isinstance(b, ipywidgets.Box)]
    parent = {id(c): b for b in boxes for c in b.children}
    def panel_of(w):
        while id(w) in parent:
            w = parent[id(w)]
            if isinstance(w, ipywidgets.VBox) and len(w.children) >= 3 and \
                    isinstance(w.children[-1], ipywidgets.Image):
                return w
        return None
    panels, sliders = [], []
    for s in live:
        if isinstance(s, ipywidgets.IntSlider) and panel_of(s) is not None:
            p = panel_of(s)
            if p not in panels:
                panels.append(p)
            sliders.append((f"panel {panels.index(p) + 1} {s.description}", s, p))
    def move(i, k):
        name, s, p = sliders[i]
        start = s.value
        if k % 2 == 0:  # forth (down where up would leave the range), then back
            s._bench_from = start
            target = start + s.step if start + s.step <= s.max else start - s.step
        else:
            target = s._bench_from
        t = time.perf_counter()
        s.value = target
        ms = 1e3 * (time.perf_counter() - t)
        status = p.children[-2].value
        split = re.search(r"run (\d+), draw (\d+)", status)
        return ms, [int(x) for x in split.groups()] if split else None
    return [name for name, _, _ in sliders], move
_bench_names, _bench_move = _bench_setup()
print("BENCH" + __import__("json").dumps(_bench_names))
'''


class Kernel:
    """A ``python3`` kernel (this Python's) in ``folder``, ``pythonpath`` first on its path."""

    def __init__(self, folder: str, pythonpath: str = ""):
        self.folder = folder
        env = dict(os.environ, MPLBACKEND="module://matplotlib_inline.backend_inline")
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        self.manager = KernelManager(kernel_name="python3")
        # The kernel's own warnings (TCP without encryption) would cut into the table.
        self.manager.start_kernel(cwd=folder, env=env, stderr=subprocess.DEVNULL)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def run(self, code: str, timeout: float = 600) -> str:
        """Execute ``code``; its stdout, or RuntimeError with the kernel's traceback."""
        out, errors = [], []

        def hook(msg):
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream" and content["name"] == "stdout":
                out.append(content["text"])
            elif kind == "error":
                errors.append("\n".join(content["traceback"]))

        self.client.execute_interactive(code, timeout=timeout, output_hook=hook)
        if errors:
            raise RuntimeError(errors[0])
        return "".join(out)

    def run_lab(self, path: str) -> list[str]:
        """Every code cell of the notebook at ``path``, then the sliders' names."""
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                self.run(cell.source)
        out = self.run(KERNEL_CODE)
        return json.loads(out[out.index("BENCH") + 5:].splitlines()[0])

    def move(self, i: int, k: int) -> tuple[float, list | None]:
        return tuple(json.loads(self.run(f"print(__import__('json').dumps(_bench_move({i}, "
                                         f"{k})))")))

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=False)


def lab_folder(lab: str) -> str:
    """A new folder holding only a copy of ``lab``."""
    folder = tempfile.mkdtemp(prefix="ddplab-bench-")
    shutil.copy(lab, folder)
    return folder


def source_at(rev: str) -> str:
    """``src/`` as of git revision ``rev``, in a temporary folder: its path."""
    folder = tempfile.mkdtemp(prefix="ddplab-base-")
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "src"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return os.path.join(folder, "src")


def profile(kernel: Kernel, i: int, moves: int) -> str:
    return kernel.run(
        "import cProfile, io, pstats\n_p = cProfile.Profile()\n_p.enable()\n"
        f"for _k in range({moves}): _bench_move({i}, _k)\n_p.disable()\n"
        "_s = io.StringIO(); pstats.Stats(_p, stream=_s).sort_stats('cumulative')"
        ".print_stats(25); print(_s.getvalue()[-6000:])")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labs", nargs="*", default=sorted(glob.glob(f"{ROOT}/labs/*.ipynb")))
    parser.add_argument("--moves", type=int, default=4)
    parser.add_argument("--baseline", help="a git revision to compare with, move by move")
    parser.add_argument("--profile", type=int, default=0, help="moves per slider to profile")
    parser.add_argument("--installed", action="store_true",
                        help="the kernel imports the ddplab installed in its Python, not src/")
    args = parser.parse_args()
    base_src = source_at(args.baseline) if args.baseline else None
    rows = []
    head = f"{'lab':<16} {'slider':<30} {'ms':>6} {'run':>5} {'draw':>5}"
    print(head + (f" {'base ms':>8} {'ratio':>6}" if base_src else ""))
    for lab in args.labs:
        name = os.path.basename(lab)[:-6]
        kernels = [Kernel(lab_folder(lab), pythonpath="" if args.installed else f"{ROOT}/src")]
        if base_src:
            kernels.append(Kernel(lab_folder(lab), pythonpath=base_src))
        lab_rows, lab_base = [], []
        try:
            sliders = [k.run_lab(lab) for k in kernels]
            for i, slider in enumerate(sliders[0]):
                if base_src and slider not in sliders[1]:
                    continue
                moves = [[], []]
                for k in range(args.moves):
                    for which, kernel in enumerate(kernels):
                        j = i if which == 0 else sliders[1].index(slider)
                        moves[which].append(kernel.move(j, k))
                ms = statistics.median(m for m, _ in moves[0])
                splits = [s for _, s in moves[0] if s]
                run = statistics.median(s[0] for s in splits) if splits else float("nan")
                draw = statistics.median(s[1] for s in splits) if splits else float("nan")
                line = f"{name:<16} {slider:<30} {ms:6.0f} {run:5.0f} {draw:5.0f}"
                if base_src:
                    base = statistics.median(m for m, _ in moves[1])
                    line += f" {base:8.0f} {base / ms:5.1f}x"
                    lab_base.append(base)
                print(line, flush=True)
                rows.append(ms)
                lab_rows.append(ms)
                if args.profile:
                    print(profile(kernels[0], i, args.profile))
            print(f"{name:<16} {share(lab_rows)}"
                  + (f"; baseline {share(lab_base)}" if base_src else ""), flush=True)
        finally:
            close(kernels)
    if base_src:
        shutil.rmtree(os.path.dirname(base_src), ignore_errors=True)
    print(f"all labs: {share(rows)}")


def close(kernels: list) -> None:
    """Shut ``kernels`` down and remove the folders their labs were copied to."""
    for kernel in kernels:
        kernel.close()
        shutil.rmtree(kernel.folder, ignore_errors=True)


def share(times: list) -> str:
    """How many of ``times`` (ms) are within the goal, as a line."""
    within = sum(ms <= LIMIT_MS for ms in times)
    return (f"{within} of {len(times)} sliders at or under {LIMIT_MS} ms "
            f"({100 * within / max(len(times), 1):.0f}%)")


if __name__ == "__main__":
    main()
