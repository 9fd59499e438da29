"""Drive a lab in a real JupyterLab with a real browser: run it, move its first slider, time it.

    python scripts/lab_in_browser.py labs/01_averaging.ipynb [--moves 4] [--screenshot out.png]

What nbval cannot check: that a slider moved by a person re-runs real DDP and redraws. Needs
Chromium (Debian: apt-get install chromium) and Playwright (pip install playwright; never
`playwright install`). JupyterLab listens on 127.0.0.1 only and is stopped at the end. Prints
the panel's status line before and after the move (it includes the run's time).
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from playwright.sync_api import sync_playwright

CHROMIUM = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lab")
    parser.add_argument("--moves", type=int, default=4, help="ArrowRight presses on the slider")
    parser.add_argument("--screenshot")
    args = parser.parse_args()
    # JupyterLab autosaves what it runs: serve a copy, so the repository's lab stays clean.
    root = tempfile.mkdtemp(prefix="ddplab-lab-")
    shutil.copy(args.lab, root)
    lab = os.path.basename(args.lab)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip", "127.0.0.1",
         f"--port={port}", "--IdentityProvider.token=", f"--ServerApp.root_dir={root}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM)
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            for _ in range(60):  # wait for the server
                try:
                    page.goto(f"http://127.0.0.1:{port}/lab/tree/{lab}?reset")  # no restored tabs
                    break
                except Exception:
                    time.sleep(1)
            page.wait_for_selector(".jp-Notebook", timeout=60_000)
            page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=60_000)
            time.sleep(1)  # the command palette is not ready at once
            page.keyboard.press("Control+Shift+c")
            time.sleep(1)
            page.keyboard.type("Run All Cells")
            time.sleep(1)
            page.keyboard.press("Enter")
            status = page.locator("text=real DDP run and drawn in").first
            status.wait_for(timeout=180_000)
            before = status.inner_text()
            handle = page.locator(".widget-slider .noUi-handle").first
            readout = page.locator(".widget-readout").first
            start_value = readout.inner_text()
            handle.click()
            for _ in range(args.moves):
                handle.press("ArrowRight")
            time.sleep(1)
            if readout.inner_text() == start_value:  # the slider starts at its maximum
                for _ in range(args.moves):
                    handle.press("ArrowLeft")
            page.wait_for_function(
                "v => document.querySelector('.widget-readout').textContent.trim() !== v",
                arg=start_value, timeout=30_000)
            # The first panel's status line (the first one on the page, as the slider is the
            # first) changes once the kernel has re-run and redrawn.
            page.wait_for_function(
                "b => { const s = [...document.querySelectorAll('.widget-html-content')]"
                ".find(e => e.textContent.startsWith('real DDP run and drawn in') "
                "|| e.textContent.startsWith('running')); "
                "return s && s.textContent.startsWith('real DDP') && s.textContent !== b; }",
                arg=before, timeout=300_000)
            print(f"slider {start_value} -> {readout.inner_text()}")
            print(f"status before: {before}")
            print(f"status after:  {status.inner_text()}")
            if args.screenshot:
                page.screenshot(path=args.screenshot)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
