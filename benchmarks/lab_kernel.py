"""A lab run top to bottom in a real Jupyter kernel, and its sliders moved there.

What ``all_sliders.py`` and ``sweep_first_figure.py`` share: a kernel of this venv's
``python3`` in a folder holding only the lab, the code that finds every ``IntSlider`` of a
panel among the kernel's live widgets, and two ways to move one: from a cell (the kernel sets
the value itself) or as the page does, by a ``comm_msg``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time

import nbformat
from jupyter_client import KernelManager

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
        split = re.search(r"real DDP run and drawn in .*run (\d+), draw (\d+)", status)
        kept = "run ahead while you read" in status or "kept from before" in status
        return ms, [int(x) for x in split.groups()] if split else None, kept
    ids = [dict(slider=s.model_id, status=p.children[-2].model_id, value=s.value, min=s.min,
                max=s.max, step=s.step, text=p.children[-2].value) for _, s, p in sliders]
    return [name for name, _, _ in sliders], move, ids
_bench_names, _bench_move, _bench_ids = _bench_setup()
print("BENCH" + __import__("json").dumps(_bench_names))
print("IDS" + __import__("json").dumps(_bench_ids))
'''


class Kernel:
    """A ``python3`` kernel (this Python's) in ``folder``, ``pythonpath`` first on its path;
    ``ahead`` False turns off running ahead (``DDPLAB_AHEAD=0``)."""

    def __init__(self, folder: str, pythonpath: str = "", ahead: bool = True):
        self.folder = folder
        env = dict(os.environ, MPLBACKEND="module://matplotlib_inline.backend_inline")
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        if not ahead:  # nothing run ahead (ddplab.screen.ahead): every move runs
            env["DDPLAB_AHEAD"] = "0"
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
        self.ids = json.loads(out[out.index("IDS") + 3:].splitlines()[0])
        return json.loads(out[out.index("BENCH") + 5:].splitlines()[0])

    def send_move(self, i: int, value: int) -> tuple[float, str]:
        """Set slider ``i`` to ``value`` as the page does (a comm message); the ms until the
        kernel is idle again, and the panel's status line as it then stands."""
        ids = self.ids[i]
        content = {"comm_id": ids["slider"], "data": {
            "method": "update", "state": {"value": value}, "buffer_paths": []}}
        message = self.client.session.msg("comm_msg", content)
        # A status line set to the text it had sends nothing: the panel's last text then.
        status = ids["text"]
        start = time.perf_counter()
        self.client.shell_channel.send(message)
        while True:
            msg = self.client.get_iopub_msg(timeout=600)
            content = msg["content"]
            if msg["parent_header"].get("msg_id") != message["header"]["msg_id"]:
                continue
            if msg["msg_type"] == "comm_msg" and content.get("comm_id") == ids["status"]:
                status = content["data"].get("state", {}).get("value", status)
            elif msg["msg_type"] == "status" and content["execution_state"] == "idle":
                for other in self.ids:  # every slider of the panel shares its status line
                    if other["status"] == ids["status"]:
                        other["text"] = status
                return 1e3 * (time.perf_counter() - start), status

    def move(self, i: int, k: int) -> tuple[float, list | None, bool]:
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


def close(kernels: list) -> None:
    """Shut ``kernels`` down and remove the folders their labs were copied to."""
    for kernel in kernels:
        kernel.close()
        shutil.rmtree(kernel.folder, ignore_errors=True)
