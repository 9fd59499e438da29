"""Drive a lab in a real JupyterLab with a real browser: run it, move a slider, time each move.

    python scripts/lab_in_browser.py labs/01_averaging.ipynb [--slider 1] [--moves 10]
                                     [--first-panel] [--width 1300] [--screenshot out.png]

What nbval cannot check: that a slider moved by a person re-runs real DDP and redraws. Each
move is one key press (right, then left, alternately); its time runs from the key press to the
panel's new figure decoded in the page, so it includes the kernel's run, the drawing and the
trip through JupyterLab. In lab 1, slider 1 is the batch size of the first panel, at world
size 4. ``--first-panel`` cuts the lab after its first slider panel, as the browser check
does. ``--screenshot`` keeps a PNG of the notebook's cells as the page shows them after the
moves (JupyterLab's menus and sidebars left out), at the browser window's ``--width``. Needs
Chromium and Playwright (see scripts/browser.py).
"""

import argparse
import os
import sys

from playwright.sync_api import sync_playwright

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import browser  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lab")
    parser.add_argument("--slider", type=int, default=0, help="which slider, from 0, in order")
    parser.add_argument("--moves", type=int, default=10)
    parser.add_argument("--first-panel", action="store_true",
                        help="the lab cut after its first slider panel")
    parser.add_argument("--width", type=int, default=1300, help="the browser window's, in px")
    parser.add_argument("--screenshot", help="a PNG of the notebook's cells, after the moves")
    args = parser.parse_args()
    with browser.jupyterlab([args.lab], through_first_panel=args.first_panel) as urls, \
            sync_playwright() as p:
        chromium = browser.launch(p)
        page = chromium.new_page(viewport={"width": args.width, "height": 1000})
        browser.run_all(page, urls[args.lab])
        # The moved slider's own panel's status line (its HTML widget), not the lab's first.
        slider = page.locator(".widget-slider").nth(args.slider)

        def status() -> str:
            return slider.evaluate("s => [...s.closest('.widget-vbox').querySelectorAll("
                                   "'.widget-html')].map(e => e.innerText).join(' ')")

        print(f"first run: {status()}")
        shown = []
        times = browser.move_and_time(page, args.slider, args.moves,
                                      lambda: print(f"  {status()}"), running=shown)
        print("moves (ms):", " ".join(f"{t:.0f}" for t in times))
        seen = [t for t in shown if t is not None]
        print("'running' shown after (ms):", " ".join(f"{t:.0f}" for t in seen) or "never",
              f"({len(seen)} of {len(shown)} moves showed it before their figure)")
        print(f"slider {args.slider}: {browser.summary(times)}")
        print(f"status after: {status()}")
        if args.screenshot:
            cells(page, args.screenshot)
        chromium.close()


def cells(page, path: str) -> None:
    """A PNG at ``path`` of the notebook's cells, top to bottom: the file browser closed, the
    window made tall enough for every cell, the picture cut to the cells."""
    page.evaluate("jupyterapp.shell.collapseLeft()")
    box = {}
    for _ in range(5):  # each taller window lays the notebook out again: until all of it fits
        page.evaluate("document.querySelector('.jp-Cell').scrollIntoView()")
        page.wait_for_timeout(1000)
        box = page.evaluate("""() => { const cells = [...document.querySelectorAll('.jp-Cell')];
            const first = cells[0].getBoundingClientRect();
            const last = cells.at(-1).getBoundingClientRect();
            return {x: first.left, y: first.top, width: first.width,
                    height: last.bottom - first.top}; }""")
        needed = int(box["y"] + box["height"] + 40)
        if needed <= page.viewport_size["height"]:
            break
        page.set_viewport_size({"width": page.viewport_size["width"], "height": needed})
    page.screenshot(path=path, clip=box)


if __name__ == "__main__":
    main()
