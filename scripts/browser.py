"""What the browser scripts share: Chromium as CI runs it, and a lab in a real JupyterLab.

Chromium is Debian's (`apt-get install chromium`), driven by Playwright from PyPI with
``executable_path`` (never `playwright install`, which downloads a browser). JupyterLab listens
on 127.0.0.1 only, behind a token made afresh for each start, serves a copy of the lab (it
autosaves what it runs, and the repository's labs must stay clean), and is stopped at the end.
It takes its defaults from ``scripts/jupyterlab/overrides.json`` (no "notified about official
Jupyter news?" prompt over the lab) and keeps its user settings in the copy's folder: the
user's own config is untouched.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

CHROMIUM = "/usr/bin/chromium"
# JupyterLab's settings defaults for the labs (``--LabApp.app_settings_dir``; make lab too)
LAB_SETTINGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jupyterlab")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run"]


def launch(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _through_first_panel(path: str) -> None:
    """Cut the notebook at ``path`` after its first slider panel (its first
    ``widgets.explore`` call)."""
    with open(path) as f:
        notebook = json.load(f)
    cells = notebook["cells"]
    first = next(i for i, c in enumerate(cells) if c["cell_type"] == "code"
                 and "widgets.explore(" in "".join(c["source"]))
    notebook["cells"] = cells[:first + 1]
    # A panel kept for a later chooser (``x = widgets.explore(...)``, labs 6 and 8) is shown
    # by itself, so the later panels need not run first.
    kept = re.match(r"(\w+) = widgets\.explore\(", "".join(cells[first]["source"]))
    if kept:
        notebook["cells"].append({"cell_type": "code", "execution_count": None, "metadata": {},
                                  "outputs": [], "source": [kept.group(1)]})
    with open(path, "w") as f:
        json.dump(notebook, f)


@contextlib.contextmanager
def jupyterlab(labs: list[str], through_first_panel: bool = False):
    """Yield ``{lab: URL}`` for copies of ``labs`` in one JupyterLab on 127.0.0.1; with
    ``through_first_panel``, each copy ends with the lab's first slider panel. The page
    exposes the app (``window.jupyterapp``), so a script can run its commands."""
    root = tempfile.mkdtemp(prefix="ddplab-lab-")
    for lab in labs:
        shutil.copy(lab, root)
        if through_first_panel:
            _through_first_panel(os.path.join(root, os.path.basename(lab)))
    port, token = free_port(), secrets.token_hex(16)
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip", "127.0.0.1",
         f"--port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--LabApp.expose_app_in_browser=True", f"--LabApp.app_settings_dir={LAB_SETTINGS}",
         f"--LabApp.user_settings_dir={os.path.join(root, '.user-settings')}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # ?reset: no tabs of an earlier lab; the token signs the page in (a cookie after it)
        yield {lab: f"http://127.0.0.1:{port}/lab/tree/{os.path.basename(lab)}?reset&"
                    f"token={token}" for lab in labs}
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(root, ignore_errors=True)


def run_all(page, url: str) -> None:
    """Open the lab, run every cell, and wait for the first panel's first figure."""
    for _ in range(60):  # wait for the server
        try:
            page.goto(url)
            break
        except Exception:
            time.sleep(1)
    page.wait_for_selector(".jp-Notebook", timeout=60_000)
    page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=60_000)
    page.evaluate("jupyterapp.commands.execute('notebook:run-all-cells')")
    page.locator("text=real DDP run and drawn in").first.wait_for(timeout=180_000)
    page.locator(".widget-vbox img").first.wait_for(timeout=60_000)


def shut_down_kernels(page) -> None:
    """End every kernel of the page's JupyterLab (and with it the lab's rank processes)."""
    page.evaluate("jupyterapp.serviceManager.sessions.shutdownAll()")


# In the page: time from the key press on a slider to its panel showing a new, decoded figure
# (the promise window.ddplabMove.done gives the ms): a new <img> (an output area refilled) or
# a new src (an image widget's bytes replaced).
_WATCH = """slider => {
  const panel = slider.closest(".widget-vbox");
  const old = panel.querySelector("img"), oldSrc = old && old.src;
  const move = window.ddplabMove = {start: null, running: null};
  // A promise the test awaits: polling for the new figure would take the CPU it measures.
  move.done = new Promise(resolve => {
    const watcher = new MutationObserver(() => {
      const img = panel.querySelector("img");
      // When the page first says the move is being run (the status line's "running"): what a
      // reader sees of a move that takes longer than the goal.
      if (move.start !== null && move.running === null && /running/.test(panel.innerText))
        move.running = performance.now() - move.start;
      if (move.start === null || !img || (img === old && img.src === oldSrc)) return;
      watcher.disconnect();
      img.decode().then(() => resolve(performance.now() - move.start));
    });
    watcher.observe(panel, {childList: true, subtree: true, attributes: true});
  });
  slider.querySelector(".noUi-handle").addEventListener(
    "keydown", () => { move.start = performance.now(); }, {once: true});
}"""


def move_and_time(page, slider_index: int, moves: int, after_each=None,
                  running: list | None = None) -> list[float]:
    """Press ArrowRight then ArrowLeft (left first at the slider's maximum) on the
    ``slider_index``-th slider, ``moves`` times in all, and return the ms from each key press
    to the new figure on the page. ``running``, where given, gets for each move the ms until the
    page first said it was running (None where the figure came before any such line)."""
    slider = page.locator(".widget-slider").nth(slider_index)
    handle = slider.locator(".noUi-handle")
    handle.click()
    page.wait_for_timeout(1000)  # a click can move the slider too: let that run finish
    # At its maximum a slider moves left first (a right press there changes nothing).
    at_max = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
    keys = ["ArrowLeft", "ArrowRight"] if at_max else ["ArrowRight", "ArrowLeft"]
    times = []
    for i in range(moves):
        page.evaluate(_WATCH, slider.element_handle())
        handle.press(keys[i % 2])
        times.append(page.evaluate(  # no figure within two minutes: an error, not a hang
            "Promise.race([window.ddplabMove.done, new Promise((_, no) => setTimeout("
            "() => no(new Error('no new figure within 120 s')), 120000))])"))
        if running is not None:
            running.append(page.evaluate("window.ddplabMove.running"))
        page.wait_for_timeout(300)  # the status line and the kernel settle
        if after_each:
            after_each()
    return times


def summary(times: list[float]) -> str:
    return (f"median {statistics.median(times):.0f} ms over {len(times)} moves "
            f"(min {min(times):.0f}, max {max(times):.0f})")
