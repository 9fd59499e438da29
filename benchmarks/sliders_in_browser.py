"""Every slider of every lab, moved in JupyterLab in Chromium and timed to the figure on screen.

    python benchmarks/sliders_in_browser.py [labs/01_averaging.ipynb ...] [--moves 3]
                                            [--reading 3] [--lab-deadline 900] [--write]

One JupyterLab (``scripts/browser.py``: 127.0.0.1 only, started and stopped by
this script) serves copies of the labs; headless Chromium opens one lab at a time, runs all its
cells, and waits until every cell has run and the kernel is idle. Then every integer slider of
every panel is moved as a reader moves it: a pause of ``--reading`` seconds (the reader reads
the figure; the kernel runs the values next to each slider meanwhile, ``ddplab.screen.ahead``),
one arrow key on the slider's handle (one step on, turning at the slider's end, so each move
shows a value not shown before), then the next pause. A panel behind a chooser (labs 6 and 8)
is chosen first. Each move's time runs from the key press (``keydown``, in the page) to the
panel's figure changing on screen: a new ``src`` on the panel's ``<img>`` (the Image widget's
bytes replaced; a sweep's first partial figure counts), that PNG decoded (``img.decode()``) and
the next animation frame begun. It is not the kernel's reply: it holds the trip through
JupyterLab, the decode and the page's layout. A move whose figure is the same picture
(the kernel sends no new bytes) is timed to its status line's final text instead, marked ``=``.

Per slider it prints the median and the worst of ``--moves`` moves, the kernel's own time
(its status line's "drawn in" or "shown in", median), and how the moves were answered (``a``
run ahead while the reader read, ``k`` kept from before, ``r`` run at the move), and the
median part of a move from the new PNG's ``src`` in the page to it on screen (``decode``: the
decode and a frame; the rest is the kernel and the trip). ``--each`` also prints every move's
times and its status line. Panels with
a ``timeout`` control run nothing ahead (their point is the wait for a hang) and are marked
``hang``. Each lab has ``--lab-deadline`` seconds; a lab that does not load or runs out of
time is skipped with a line saying so, and the others still run. ``--write`` puts the table,
with the date, the machine and its load average before and after, into ``benchmarks/RESULTS.md``
("Sliders as the reader sees them", between its markers; text around them is kept).
Needs Chromium and Playwright (``scripts/browser.py``).
"""

from __future__ import annotations

import argparse
import datetime
import glob
import os
import re
import statistics
import sys
import textwrap
import time

from playwright.sync_api import sync_playwright

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import browser  # noqa: E402

LIMIT_MS = 150
RESULTS = os.path.join(ROOT, "benchmarks", "RESULTS.md")
SECTION = "## Sliders as the reader sees them"
BEGIN, END = "<!-- sliders_in_browser: begin -->", "<!-- sliders_in_browser: end -->"

# In the page, before a move: watch the slider's panel and resolve window.ddplabMove.done with
# {ms, same} once its figure changes on screen (or, where the kernel sends the same picture,
# once the status line has its final text and 1.5 s pass without a new figure).
_WATCH = """slider => {
  const panel = slider.closest(".widget-vbox");
  const status = () => [...panel.children].filter(e => e.classList.contains("widget-html"))
    .map(e => e.textContent).at(-1) || "";
  const img = panel.querySelector(":scope > img"), oldSrc = img.src, oldStatus = status();
  const move = window.ddplabMove = {start: null};
  move.done = new Promise(resolve => {
    let settled = null;
    const watcher = new MutationObserver(() => {
      if (move.start === null) return;
      const now = panel.querySelector(":scope > img");
      if (now !== img || now.src !== oldSrc) {
        watcher.disconnect();
        const arrived = performance.now() - move.start;  // the new PNG's src is in the page
        now.decode().catch(() => null).then(() => requestAnimationFrame(
          () => resolve({ms: performance.now() - move.start, arrived: arrived, same: false})));
        return;
      }
      const text = status();
      if (text !== oldStatus && !/running/.test(text) && settled === null) {
        settled = performance.now() - move.start;
        setTimeout(() => { watcher.disconnect();
                            resolve({ms: settled, arrived: settled, same: true}); }, 1500);
      }
    });
    watcher.observe(panel, {childList: true, subtree: true, attributes: true,
                            characterData: true});
  });
  slider.querySelector(".noUi-handle").addEventListener(
    "keydown", () => { move.start = performance.now(); }, {once: true});
}"""

# Every slider's panel on the page now, as [panel index, slider index in the page, its name],
# and the choosers (a dropdown over panels, ``widgets.choose``) with their option labels.
_FIND = """() => {
  const sliders = [...document.querySelectorAll(".jp-Notebook .widget-slider")];
  const panels = [...new Set(sliders.map(s => s.closest(".widget-vbox")))];
  const choosers = [...document.querySelectorAll(".jp-Notebook .widget-dropdown")].filter(
    d => d.parentElement.classList.contains("widget-vbox") &&
         d.nextElementSibling && d.nextElementSibling.classList.contains("widget-vbox"));
  return {
    sliders: sliders.map((s, i) => {
      const panel = s.closest(".widget-vbox");
      const chooser = choosers.findIndex(d => d.nextElementSibling.contains(panel));
      const hang = [...panel.querySelectorAll(".widget-label")].some(
        l => l.textContent.trim() === "timeout");
      return {index: i, panel: panels.indexOf(panel), chooser: chooser,
              name: s.querySelector(".widget-label").textContent.trim(), hang: hang};
    }),
    choosers: choosers.map(d => [...d.querySelectorAll("option")].map(o => o.textContent)),
  };
}"""


def status_of(slider) -> str:
    """The status line of ``slider``'s panel (its last HTML widget but one before the image)."""
    return slider.evaluate("s => [...s.closest('.widget-vbox').children].filter(e => "
                           "e.classList.contains('widget-html')).map(e => e.textContent).at(-1)")


def kernel_ms(status: str) -> float:
    """The kernel's own time for a move, from its status line ("drawn in" / "shown in")."""
    found = re.search(r"(?:shown|drawn) in (\d+) ms", status)
    return float(found.group(1)) if found else float("nan")


def source_of(status: str) -> str:
    """How a move was answered, by its status line: run ahead, kept, run, or neither."""
    if "run ahead while you read" in status:
        return "a"
    if "kept from before" in status:
        return "k"
    return "r" if "real DDP run and drawn in" in status else "?"


def open_lab(page, url: str, deadline: float) -> None:
    """Open the lab, run all its cells, and wait until every cell has run and the kernel is
    idle (a lab runs its panels' first figures as it goes)."""
    left = lambda: max(1_000, int(1e3 * (deadline - time.monotonic())))  # noqa: E731
    for _ in range(60):  # the server may still be starting
        try:
            page.goto(url)
            break
        except Exception:
            time.sleep(1)
    page.wait_for_selector(".jp-Notebook", timeout=min(left(), 60_000))
    page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=min(left(), 60_000))
    page.evaluate("jupyterapp.commands.execute('notebook:run-all-cells')")
    # Each code cell's execution count (None while queued or running), from the notebook's
    # model: JupyterLab leaves cells out of view unrendered, so their prompts read empty.
    page.wait_for_function(
        """() => { const nb = jupyterapp.shell.currentWidget;
                   const cells = Array.from(nb.content.model.cells);
                   return cells.every(c => c.type !== 'code' || c.executionCount !== null)
                          && nb.sessionContext.session.kernel.status === 'idle'; }""",
        timeout=left(), polling=1000)
    errors = page.evaluate(
        """() => Array.from(jupyterapp.shell.currentWidget.content.model.cells).flatMap(
             c => c.type === 'code' ? c.toJSON().outputs.filter(o => o.output_type === 'error')
                                      .map(o => `${o.ename}: ${o.evalue}`) : [])""")
    if errors:
        raise RuntimeError(f"a cell failed: {errors[0]}")


def move_slider(page, index: int, moves: int, reading: float, deadline: float) -> list[dict]:
    """Move the ``index``-th slider on the page ``moves`` times as a reader does; each move's
    ms to the figure on screen, whether the figure stayed the same, and the status after."""
    slider = page.locator(".jp-Notebook .widget-slider").nth(index)
    handle = slider.locator(".noUi-handle")
    slider.evaluate("s => s.closest('.widget-vbox').scrollIntoView({block: 'start'})")
    direction, done = 1, []
    for _ in range(moves):
        page.wait_for_timeout(1e3 * reading)  # the reader reads (and the kernel runs ahead)
        value, top, bottom = (float(handle.get_attribute(a)) for a in
                              ("aria-valuenow", "aria-valuemax", "aria-valuemin"))
        if value == (top if direction > 0 else bottom):
            direction = -direction  # one step on, turning at the slider's end
        page.evaluate(_WATCH, slider.element_handle())
        handle.press("ArrowRight" if direction > 0 else "ArrowLeft")
        wait = max(1_000, min(120_000, int(1e3 * (deadline - time.monotonic()))))
        result = page.evaluate(
            "ms => Promise.race([window.ddplabMove.done, new Promise((_, no) => setTimeout("
            "() => no(new Error(`no new figure within ${ms / 1e3} s`)), ms))])", wait)
        page.wait_for_timeout(200)  # the status line's final text follows the figure
        if float(handle.get_attribute("aria-valuenow")) == value:
            raise RuntimeError(f"slider {index} did not move from {value:g}")
        done.append({**result, "status": status_of(slider)})
    return done


def run_lab(chromium, lab: str, url: str, args) -> list[dict]:
    """Every slider of ``lab`` moved: a row per slider (lab, panel, slider, the moves)."""
    name = os.path.basename(lab)[:-6]
    deadline = time.monotonic() + args.lab_deadline
    page = chromium.new_page(viewport={"width": 1300, "height": 1200})
    rows = []
    try:
        start = time.monotonic()
        open_lab(page, url, deadline)
        print(f"{name}: ran in {time.monotonic() - start:.0f} s", flush=True)
        found = page.evaluate(_FIND)
        todo = [(None, None)] + [(c, label) for c, labels in enumerate(found["choosers"])
                                 for label in labels]
        for chooser, label in todo:
            if chooser is not None:  # show that panel, as a reader picks it
                page.locator(".jp-Notebook .widget-dropdown select").nth(
                    chooser_index(page, chooser)).select_option(label=label)
                page.wait_for_timeout(1000)
                found = page.evaluate(_FIND)
            for s in found["sliders"]:
                if s["chooser"] != (chooser if chooser is not None else -1):
                    continue
                if time.monotonic() > deadline:
                    print(f"{name}: past its {args.lab_deadline:.0f} s deadline: "
                          f"{label or 'panel ' + str(s['panel'] + 1)} {s['name']} and the "
                          f"sliders after it not moved", flush=True)
                    return rows
                panel = label.replace(" ", "_") if label else f"panel {s['panel'] + 1}"
                moves = move_slider(page, s["index"], args.moves, args.reading, deadline)
                row = {"lab": name, "panel": panel, "slider": s["name"], "hang": s["hang"],
                       "moves": moves}
                print(line(row), flush=True)
                for m in moves if args.each else []:
                    print(f"    {m['ms']:6.0f} ms, new PNG in the page at {m['arrived']:.0f}: "
                          f"{m['status'][:60]}", flush=True)
                rows.append(row)
    except Exception as exc:  # one lab that does not load must not stop the others
        print(f"{name}: skipped from here: {type(exc).__name__}: "
              f"{str(exc).splitlines()[0][:160]}", flush=True)
    finally:
        try:
            browser.shut_down_kernels(page)
        finally:
            page.close()
    return rows


def chooser_index(page, chooser: int) -> int:
    """The page index, among all dropdowns' ``<select>``, of the ``chooser``-th chooser."""
    return page.evaluate(
        """c => { const all = [...document.querySelectorAll('.jp-Notebook .widget-dropdown')];
           const choosers = all.filter(d => d.parentElement.classList.contains('widget-vbox')
             && d.nextElementSibling && d.nextElementSibling.classList.contains('widget-vbox'));
           return all.indexOf(choosers[c]); }""", chooser)


def figures(row: dict) -> tuple[float, float, float, float, str]:
    """A row's median and worst ms; its kernel's median ms; the median ms from the new PNG in
    the page to it on screen (the decode and a frame); how its moves were answered."""
    times = [m["ms"] for m in row["moves"]]
    kernel = [kernel_ms(m["status"]) for m in row["moves"]]
    kernel = [k for k in kernel if k == k]
    answered = "".join(source_of(m["status"]) + ("=" if m["same"] else "") for m in row["moves"])
    return (statistics.median(times), max(times),
            statistics.median(kernel) if kernel else float("nan"),
            statistics.median(m["ms"] - m["arrived"] for m in row["moves"]), answered)


HEAD = (f"{'lab':<17} {'panel':<20} {'slider':<18} {'median':>6} {'worst':>6} {'kernel':>6} "
        f"{'decode':>6} {'moves':<6} note")


def note_of(row: dict, median: float) -> str:
    return "hang" if row["hang"] else ("over" if median > LIMIT_MS else "")


def line(row: dict) -> str:
    median, worst, kernel, decode, answered = figures(row)
    return (f"{row['lab']:<17} {row['panel'][:20]:<20} {row['slider'][:18]:<18} {median:6.0f} "
            f"{worst:6.0f} {kernel:6.0f} {decode:6.0f} {answered:<6} "
            f"{note_of(row, median)}").rstrip()


def share(rows: list[dict]) -> str:
    others = [r for r in rows if not r["hang"]]
    within = sum(figures(r)[0] <= LIMIT_MS for r in others)
    return (f"{within} of {len(others)} sliders (hang demonstrations aside, "
            f"{len(rows) - len(others)} of them) at or under {LIMIT_MS} ms by their median")


def markdown(rows: list[dict], args, loads: tuple, skipped: list[str], took: float) -> str:
    """The table and its conditions, as the Markdown that goes between the markers."""
    before, after = loads
    loaded = max(before[0], after[0]) > 4
    out = [f"Run {datetime.date.today().isoformat()}: this 2-core VM, CPU only, no GPU; load "
           f"average (1, 5, 15 min) {', '.join(f'{x:.1f}' for x in before)} before and "
           f"{', '.join(f'{x:.1f}' for x in after)} after"
           + (" (above 4: other jobs shared the 2 cores, so these are a loaded machine's "
              "figures)" if loaded else "")
           + f"; `--moves {args.moves} --reading {args.reading:g}`, {took / 60:.0f} min in all. "
           f"{share(rows)}.", ""]
    out[0] = textwrap.fill(out[0], 96)
    if skipped:
        out += [f"Not measured: {'; '.join(skipped)}.", ""]
    out += ["| lab | panel | slider | median ms | worst ms | kernel ms | decode ms | moves | "
            "note |", "|---|---|---|---:|---:|---:|---:|---|---|"]
    for row in rows:
        median, worst, kernel, decode, answered = figures(row)
        note = {"hang": "hang demonstration", "over": "**over**", "": ""}[note_of(row, median)]
        out.append(f"| {row['lab']} | {row['panel'].replace('_', ' ')} | {row['slider']} | "
                   f"{median:.0f} | {worst:.0f} | {kernel:.0f} | {decode:.0f} | {answered} | "
                   f"{note} |")
    return "\n".join(out)


def write(table: str) -> None:
    """Put ``table`` between the markers of RESULTS.md's section, making it where missing
    (before "## Colab"), and keep whatever else the section says."""
    with open(RESULTS) as f:
        text = f.read()
    block = f"{BEGIN}\n{table}\n{END}"
    if BEGIN in text:
        text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        section = f"{SECTION}\n\n{block}\n\n"
        at = text.index("## Colab") if "## Colab" in text else len(text)
        text = text[:at] + section + text[at:]
    with open(RESULTS, "w") as f:
        f.write(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labs", nargs="*", default=sorted(glob.glob(f"{ROOT}/labs/*.ipynb")))
    parser.add_argument("--moves", type=int, default=3, help="moves per slider")
    parser.add_argument("--reading", type=float, default=3.0, metavar="SECONDS",
                        help="the pause before each move, as a reader reads the figure")
    parser.add_argument("--lab-deadline", type=float, default=900.0, metavar="SECONDS",
                        help="each lab's time, from opening it to its last move")
    parser.add_argument("--each", action="store_true",
                        help="print every move: its times and its panel's status line")
    parser.add_argument("--write", action="store_true",
                        help="put the table into benchmarks/RESULTS.md")
    args = parser.parse_args()
    loads, start = [os.getloadavg()], time.monotonic()
    labs, skipped = [], []
    for lab in args.labs:
        with open(lab) as f:
            if "widgets.explore" in f.read():
                labs.append(lab)
            else:
                print(f"{os.path.basename(lab)[:-6]}: no slider panel, not opened")
    rows = []
    print(HEAD, flush=True)
    with browser.jupyterlab(labs) as urls, sync_playwright() as p:
        chromium = browser.launch(p)
        for lab in labs:
            lab_rows = run_lab(chromium, lab, urls[lab], args)
            if not lab_rows:
                skipped.append(f"{os.path.basename(lab)[:-6]} (did not load in time)")
            rows += lab_rows
        chromium.close()
    loads.append(os.getloadavg())
    print(HEAD)
    for row in rows:
        print(line(row))
    print(share(rows))
    print("load average before " + ", ".join(f"{x:.1f}" for x in loads[0]) + "; after "
          + ", ".join(f"{x:.1f}" for x in loads[1]))
    if args.write:
        write(markdown(rows, args, tuple(loads), skipped, time.monotonic() - start))
        print(f"written to {os.path.relpath(RESULTS, ROOT)}")


if __name__ == "__main__":
    main()
