"""Drive a lab in a real JupyterLab with a real browser: run it, move a slider, time each move.

    python scripts/lab_in_browser.py labs/01_averaging.ipynb [--slider 1] [--moves 10]
                                     [--screenshot out.png]

What nbval cannot check: that a slider moved by a person re-runs real DDP and redraws. Each
move is one key press (right, then left, alternately); its time runs from the key press to the
panel's new figure decoded in the page, so it includes the kernel's run, the drawing and the
trip through JupyterLab. In lab 1, slider 1 is the batch size of the first panel, at world
size 4. Needs Chromium and Playwright (see scripts/browser.py).
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
    parser.add_argument("--screenshot")
    args = parser.parse_args()
    with browser.jupyterlab([args.lab]) as urls, sync_playwright() as p:
        chromium = browser.launch(p)
        page = chromium.new_page(viewport={"width": 1300, "height": 1000})
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
            page.screenshot(path=args.screenshot)
        chromium.close()


if __name__ == "__main__":
    main()
