"""Check the built book the way a reader sees it: every page in a real browser, then one lab.

    python scripts/check_book_in_browser.py [--html _build/html] [--screenshots DIR]
        [--no-lab | --labs-only] [--report _build/report/report.html]

Every page of the built book, served on 127.0.0.1: no console error, no request leaving the
book's own files (such a request is blocked and reported), every image loaded, every internal
link (and its #anchor) resolving, each Colab button opening a lab that exists in labs/, the
page under 6 MB and each static panel under 1.5 MB; at 1280 and 390 px nothing reaching past
the screen's edge, and at 1280 px no block of code or output that wraps or scrolls sideways (a
printout wider than the column's 100 characters fails, with its page, width and first
characters: make the formatter that prints it wrap it); the book's search finds the error index
for every message it lists, and lists the answering page first for "ZeRO", "FSDP", "clip" and
"watchdog" (``TOPICS``); the running page's Colab section shows a lab's picture and the
recorded times (``COLAB_SECTION``); for each phrasing of ``PHRASES`` its first result opens at
the section that answers it; each of the doctor's book links opens a section of the built book.
On a page with static panels, moving each control changes the figure and the text. Then the labs
in one real JupyterLab, each run up to its first panel: in the first (--lab) a slider move
re-runs real DDP and the figure changes, the time from the move to the new figure printed; then
every other lab (unless --one-lab), its first slider moved, the times printed. Then
``ddplab report``'s page (--report, written by ``make report``), opened as a reader opens an
attached file, from file://: no console error, no request at all beyond its own data: URIs,
every figure loaded and on screen.
--no-lab checks the pages and the report only; --labs-only the labs only (they need no built
book, so CI runs them beside the tests, and the rest after the book).
A full-page screenshot of each page goes to DIR (default _build/screenshots). Prints
"N passed, M failed" and exits non-zero on a failure. Needs Chromium and Playwright (see
scripts/browser.py).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import sys
import threading
import time
import urllib.parse
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import browser  # noqa: E402

from ddplab.chapters.training_loop import printed_warnings  # noqa: E402
from ddplab.common import home  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MAX_PAGE_BYTES = 6_000_000
MAX_PANEL_BYTES = 1_500_000
COLAB = re.compile(r"^https://colab\.research\.google\.com/github/[^/]+/[^/]+/blob/[^/]+/(.+)$")


# The pages a reader starts from carry the install box (book/_install.md), with the line the
# cluster page gives.
INSTALL_PAGES = ("book/intro.html", "book/running.html", "book/doctor.html")
INSTALL_LINE = home.install_line()
# An address of this project (its repository or Pages site, under any owner): each link to one
# must be made from the home pyproject.toml names (ddplab.common.home), the Colab buttons too.
PROJECT = re.compile(r"github\.com/[^/]+/ddplab|\.github\.io/ddplab", re.IGNORECASE)
HOME_MADE = (home.repository(), home.pages_site(),
             "https://colab.research.google.com/github/" + "/".join(home.owner_and_name()) + "/")
# The running page shows a lab as a reader meets it in Colab: a section (page, label) with a
# picture of a lab and the times the Colab simulation recorded, printed by the page.
COLAB_SECTION = ("book/running.html", "running-colab", "in the Colab simulation")
_SECTION_SHOWS = """([label, words]) => {
  const mark = document.getElementById(label);
  const section = mark && (mark.tagName == 'SECTION' ? mark : mark.closest('section'));
  if (!section) return 'no section';
  const shown = [...section.querySelectorAll('img')].filter(i => i.naturalWidth > 0).length;
  return (shown ? '' : 'no picture shown; ') +
         (section.innerText.includes(words) ? '' : `no "${words}"`);
}"""


class Checks:
    def __init__(self):
        self.passed, self.failed = 0, []

    def check(self, ok: bool, what: str) -> bool:
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)
            print(f"  FAILED: {what}")
        return ok


def serve(directory: Path):
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", browser.free_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@functools.cache
def anchors(path: Path) -> frozenset:
    return frozenset(re.findall(r'\bid="([^"]+)"', path.read_text(errors="replace")))


def check_page(page, checks: Checks, html: Path, base: str, rel: str, shots: Path) -> None:
    errors, outside, fetched = [], [], set()
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def route(r):
        url = r.request.url
        if url.startswith((base, "data:", "blob:")):
            if url.startswith(base):
                fetched.add(urllib.parse.urlparse(url).path.lstrip("/"))
            r.continue_()
        else:
            outside.append(url)
            r.abort()

    page.route("**/*", route)
    page.goto(base + rel, wait_until="load")
    page.wait_for_load_state("networkidle")
    shown = urllib.parse.urlparse(page.url).path.lstrip("/")  # index.html redirects
    # Images below the fold may load lazily: bring each into view and wait for it.
    images = page.evaluate("""async () => {
        const out = [];
        for (const img of document.images) {
            img.scrollIntoView();
            try { await img.decode(); } catch (e) {}
            out.push([img.currentSrc.slice(0, 80), img.naturalWidth]);
        }
        window.scrollTo(0, 0);
        return out;
    }""")
    # The page's weight: every file of the book it loaded, as stored (the server does not
    # compress), so the same page weighs the same in every run.
    weight = sum((html / urllib.parse.unquote(f)).stat().st_size for f in fetched
                 if (html / urllib.parse.unquote(f)).is_file())
    checks.check(not errors, f"{rel}: console errors {errors}")
    checks.check(not outside, f"{rel}: requests leaving the book: {outside}")
    bad = [src for src, width in images if width == 0]
    checks.check(not bad, f"{rel}: images not loaded: {bad}")
    checks.check(weight <= MAX_PAGE_BYTES, f"{rel}: {weight:,} bytes > {MAX_PAGE_BYTES:,}")
    # Formulas: every math element of the page typeset by the book's own MathJax copy.
    formulas = page.evaluate("""async () => {
        const math = document.querySelectorAll('.math');
        if (math.length && window.MathJax && MathJax.startup) await MathJax.startup.promise;
        return [math.length, document.querySelectorAll('mjx-container').length];
    }""")
    checks.check(formulas[1] >= formulas[0],
                 f"{rel}: {formulas[0]} formulas, {formulas[1]} typeset by MathJax")
    # One search box on the page (the sidebar's), not a second one in an empty header bar.
    searches = page.evaluate("""() => [...document.querySelectorAll('.search-button-field')]
        .filter(e => e.getClientRects().length && getComputedStyle(e).visibility != 'hidden')
        .length""")
    checks.check(searches == 1, f"{rel}: {searches} visible search boxes, not 1")
    check_layout(page, checks, rel, WIDE_SCREEN[0])
    check_images(page, checks, rel)
    # Internal links: the file exists, and so does the anchor.
    here = (html / shown).parent
    broken, colab, elsewhere = [], [], []
    for href in page.eval_on_selector_all("a[href]", "as => as.map(a => a.getAttribute('href'))"):
        if PROJECT.search(href) and not href.startswith(HOME_MADE):
            elsewhere.append(href)
        if match := COLAB.match(href):
            colab.append(match.group(1))
            continue
        parsed = urllib.parse.urlparse(href)
        if parsed.scheme or parsed.netloc:
            continue  # outside the book: not fetched, not checked
        target = (here / urllib.parse.unquote(parsed.path)).resolve() if parsed.path \
            else html / shown
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file() or parsed.fragment and target.suffix == ".html" \
                and parsed.fragment not in anchors(target):
            broken.append(href)
    checks.check(not broken, f"{rel}: broken internal links: {sorted(set(broken))}")
    checks.check(not elsewhere, f"{rel}: links not made from the home {home.repository()}: "
                                f"{sorted(set(elsewhere))}")
    for lab in colab:
        checks.check(lab.startswith("labs/") and (ROOT / lab).is_file(),
                     f"{rel}: Colab button opens {lab}, not a lab in labs/")
    if shown in INSTALL_PAGES:
        boxes = page.eval_on_selector_all(
            "article .admonition.install", "bs => bs.map(b => b.innerText)")
        checks.check(len(boxes) == 1 and INSTALL_LINE in boxes[0],
                     f"{rel}: no install box with {INSTALL_LINE!r} ({len(boxes)} boxes)")
    if shown == COLAB_SECTION[0]:
        wrong = page.evaluate(_SECTION_SHOWS, list(COLAB_SECTION[1:]))
        checks.check(not wrong, f"{rel}: section {COLAB_SECTION[1]}: {wrong}")
    # A launch menu (the rocket) with nothing in it: a page without a lab shows none.
    empty = page.eval_on_selector_all(".dropdown-launch-buttons",
                                      "ds => ds.filter(d => !d.querySelector('li a')).length")
    checks.check(empty == 0, f"{rel}: {empty} empty launch menu(s)")
    panels = check_panels(page, checks, rel)
    page.screenshot(path=str(shots / (rel.replace("/", "_").removesuffix(".html") + ".png")),
                    full_page=True)
    print(f"{rel}{' -> ' + shown if shown != rel else ''}: {weight / 1e6:.2f} MB in "
          f"{len(fetched)} files, {len(images)} images, {formulas[0]} formulas, "
          f"{len(colab)} Colab button(s){panels}")


# The widths a reader's screen has: a laptop, and a phone (an iPhone 12 to 15 is 390 CSS px).
WIDE_SCREEN, PHONE = (1280, 900), (390, 844)
# At 1280 px a figure shows at its own size up to this width (a 7.5-in figure at 100 px an
# inch, with its margins); text of 7.5 pt or more (tests/test_figure_text.py) is then 10 px.
FIGURE_PX = 780

_LAYOUT = """width => {
  const W = window.innerWidth, out = {overflow: [], wrapped: [], scrolled: []};
  // What reaches past the screen's right edge (its box, or text overflowing it) and is not
  // inside a box that scrolls sideways (overflow-x auto or scroll, itself on screen): the page
  // is wider than the screen there, or a box that clips it cuts it off. Hidden things (the
  // theme's closed sidebars wait off screen) do not count. The innermost such element (an
  // overflowing child widens its parents' scrollWidth too).
  const right = e => {  // a box that scrolls or clips keeps its content inside itself
    const r = e.getBoundingClientRect();
    if (r.width == 0) return 0;
    return getComputedStyle(e).overflowX != 'visible' ? r.right
                                                     : Math.max(r.right, r.left + e.scrollWidth);
  };
  const sticks = e => {
    if (right(e) <= W + 1 || !e.checkVisibility({visibilityProperty: true})) return false;
    for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
      const style = getComputedStyle(p);
      if (style.position == 'fixed') return false;
      if (['auto', 'scroll'].includes(style.overflowX) && p.getBoundingClientRect().right <= W + 1)
        return false;
    }
    return true;
  };
  for (const e of document.body.querySelectorAll('*'))
    if (sticks(e) && ![...e.children].some(sticks))
      out.overflow.push(e.parentElement.tagName.toLowerCase() + ' > ' + e.tagName.toLowerCase() +
        (e.className && e.className.split ?
        '.' + e.className.split(' ')[0] : '') + ' "' + (e.innerText || e.alt || '')
        .trim().slice(0, 50) + '" ' + Math.round(right(e)) + ' px');
  // A block of code or output whose lines wrap: taller than with white-space: pre.
  for (const pre of document.querySelectorAll('article pre')) {
    const kind = pre.closest('.cell_output, .output') ? 'output' : 'code';
    const longest = pre.innerText.split('\\n').reduce((a, b) => b.length > a.length ? b : a, '');
    const height = pre.getBoundingClientRect().height, style = pre.style.whiteSpace;
    pre.style.whiteSpace = 'pre';
    const unwrapped = pre.getBoundingClientRect().height;
    pre.style.whiteSpace = style;
    if (height > unwrapped + 1) out.wrapped.push(kind + ': ' + longest.slice(0, 70));
    else if (pre.scrollWidth > pre.clientWidth + 1)
      out.scrolled.push(kind + ' (' + longest.length + ' columns): ' + longest.slice(0, 50));
  }
  return out;
}"""


def check_layout(page, checks: Checks, rel: str, width: int) -> None:
    """Nothing makes the page wider than the screen; at the laptop's width no code or output
    wraps, and none scrolls sideways: a listing or a printout wider than the column's 100
    characters fails (its page, its width in columns and its first characters)."""
    found = page.evaluate(_LAYOUT, width)
    checks.check(not found["overflow"], f"{rel} at {width} px: past the screen's edge "
                                        f"(the page scrolls, or it is cut off): "
                                        f"{found['overflow'][:6]}")
    if width >= WIDE_SCREEN[0]:
        checks.check(not found["wrapped"], f"{rel} at {width} px: {len(found['wrapped'])} "
                                           f"wrapped block(s): {found['wrapped'][:6]}")
        code = [s for s in found["scrolled"] if s.startswith("code")]
        checks.check(not code, f"{rel} at {width} px: code that scrolls sideways: {code}")
        for line in found["scrolled"]:
            if not line.startswith("code"):
                checks.check(False, f"{rel} at {width} px, a printout wider than the column "
                                    f"scrolls in its box: {line}")


_IMAGES = """() => [...document.querySelectorAll('article img')].map(img => {
  const link = img.closest('a[href]');
  return {src: img.getAttribute('src').slice(0, 60), alt: img.getAttribute('alt') || '',
          data: img.src.startsWith('data:'), natural: img.naturalWidth,
          shown: img.getBoundingClientRect().width,
          full: !!link && link.href == img.src};
})"""
PATH_LIKE = re.compile(r"\.(png|svg|jpe?g|gif)$|^data:|_images/", re.I)


def real_alt(alt: str) -> bool:
    """Alt text that says something: a few words, not the image's file (Sphinx's default
    alt text for an image with none is its path)."""
    return len(alt.split()) >= 3 and not PATH_LIKE.search(alt.strip())


def check_images(page, checks: Checks, rel: str) -> None:
    """Each image of the text has alt text that says what it shows; each figure (not a static
    panel's, which is a data: URI) links to itself at full size and shows at its own width up
    to FIGURE_PX."""
    images = page.evaluate(_IMAGES)
    no_alt = [f"{i['src']} (alt {i['alt'][:40]!r})" for i in images if not real_alt(i["alt"])]
    checks.check(not no_alt, f"{rel}: images without real alt text: {no_alt[:4]}"
                             f"{' ...' if len(no_alt) > 4 else ''} ({len(no_alt)})")
    files = [i for i in images if not i["data"]]
    unlinked = [i["src"] for i in files if not i["full"]]
    checks.check(not unlinked, f"{rel}: figures without a link to full size: {len(unlinked)}")
    small = [f"{i['src']}: {i['shown']:.0f} of {i['natural']} px" for i in files
             if i["natural"] and i["shown"] < min(i["natural"], FIGURE_PX) - 2]
    checks.check(not small, f"{rel}: figures shown below their size: {small[:4]} "
                            f"({len(small)})")


def check_phone(page, checks: Checks, base: str, rel: str, shots: Path) -> None:
    """The page at a phone's width: nothing wider than the screen, every figure at its own
    size (in a box that scrolls), so that its text is as large as at 1280 px."""
    page.goto(base + rel, wait_until="load")
    page.wait_for_load_state("networkidle")  # index.html redirects
    check_layout(page, checks, rel, PHONE[0])
    check_images(page, checks, f"{rel} at {PHONE[0]} px")  # figures at their size: text 10 px
    page.screenshot(path=str(shots / (rel.replace("/", "_").removesuffix(".html")
                                      + f"_{PHONE[0]}.png")))


def error_messages() -> list[str]:
    """The messages the error index lists: each ``## `message` `` heading of book/errors.md,
    its first quoted part."""
    text = (ROOT / "book" / "errors.md").read_text()
    return re.findall(r"^## `([^`]+)`", text, re.M)


# A reader's search for a topic must put the page that answers it first (issue 32: "ZeRO"
# ranked the memory page 7th of 8, behind pages that only matched `zero_grad`).
TOPICS = {"ZeRO": "book/memory.html", "FSDP": "book/memory.html",
          "clip": "book/training_loop.html", "watchdog": "book/errors.html"}


# What readers type, and the section that answers it (its label): the first result must open
# the page at that section, not at the page's top (issue 49). A section that answers one
# carries an index entry for it (```{index} speedup```), which the search ranks first and
# links to the section (book/_ext/ddplab_book.py, index_entries_open_their_section).
PHRASES = {"speedup": "time-cost-slower", "slower": "time-cost-slower",
           "resume": "memory-resume-resized", "checkpoint": "hangs-checkpoints",
           "truncate": "training-loop-gather-cut", "hang": "hangs-end-of-epoch",
           "out of memory": "memory-which", "connection refused": "running-two-nodes",
           "learning rate": "lr-scaling-short-answer", "accumulation": "time-cost-accumulation",
           "colab": "running-colab", "different loss": "training-loop-one-gpu",
           "1 gpu vs": "training-loop-one-gpu", "not the same": "training-loop-one-gpu"}

# Warnings as torch 2.13 prints them, pasted whole into the search: each finds the error
# index's entry for it (the entry quotes the whole text; its heading, a part of it).
PASTED_WARNINGS = {printed_warnings.TEXTS[name]: label
                   for name, label in printed_warnings.LABELS.items()}

# Sections the book's questions send a reader to, and what each must show: (page, label,
# words in the section's text). A page's link to a section: (page, href ending).
SECTIONS_SHOW = [
    ("book/training_loop.html", "training-loop-one-gpu",
     ("num_replicas=1", "Float reduction order", "BatchNorm", "Dropout", "ddplab doctor")),
    ("book/training_loop.html", "training-loop-compile", ("model.compile()", "DDP(model)",
                                                           "_orig_mod.")),
    ("book/running.html", "running-slurm", ("sbatch", "srun", "scontrol show hostnames",
                                            "--rdzv-id", "SLURM_JOB_ID", "--nproc-per-node 8")),
    ("book/running.html", "running-variables",
     ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
      "OMP_NUM_THREADS", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA",
      "NCCL_IB_DISABLE", "NCCL_DEBUG", "TORCH_DISTRIBUTED_DEBUG", "TORCH_FR_BUFFER_SIZE",
      "TORCH_NCCL_DUMP_ON_TIMEOUT")),
    ("book/memory.html", "ddplab-memory-calculator", ("Presets (a click fills in the form)",)),
]
LINKS_TO = [("book/intro.html", "training_loop.html#training-loop-one-gpu")]
_TABLE_IN = """label => { const m = document.getElementById(label);
  const s = m && (m.tagName == 'SECTION' ? m : m.closest('section'));
  return s ? s.querySelectorAll('table').length : -1; }"""

# Whether the page opened at its #fragment shows the section that holds the label's target,
# with its heading at the top of the screen.
_AT_SECTION = """label => {
  const target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
  const mark = document.getElementById(label);
  if (!target || !mark) return `no ${target ? '' : 'target '}${mark ? '' : 'label'}`;
  const section = mark.tagName == 'SECTION' ? mark : mark.closest('section');
  if (target !== section) return `opens at #${target.id}, not the section of ${label}`;
  const top = section.querySelector('h1, h2, h3, h4').getBoundingClientRect().top;
  return top >= -1 && top < window.innerHeight / 3 ? '' : `its heading at ${Math.round(top)} px`;
}"""


def search_results(page, base: str, query: str) -> list[str]:
    """The links the book's own search lists for ``query``, best first."""
    page.goto(f"{base}search.html?q={urllib.parse.quote_plus(query)}")
    return page.wait_for_function(
        # Sphinx lists results one by one, 5 ms apart, and titles the list "Search
        # Results" only after the last: read the links once that title is there.
        """() => { const r = document.querySelector('#search-results');
                   const h = r && r.querySelector('h2');
                   return h && h.textContent.startsWith('Search Results') &&
                          [...r.querySelectorAll('a')].map(a => a.getAttribute('href')); }""",
        timeout=20_000).json_value()


def check_search(page, checks: Checks, base: str) -> None:
    """The book's own search, offline, finds the error index for each message it lists, and
    puts the answering page first for each topic of ``TOPICS``."""
    for message in error_messages():
        query = message.strip(". ")
        found = search_results(page, base, query)
        checks.check(any(href.startswith("book/errors.html") for href in found),
                     f"search for {query!r} does not find the error index: {found[:5]}")
    for query, answer in TOPICS.items():
        found = search_results(page, base, query)
        checks.check(bool(found) and found[0].startswith(answer),
                     f"search for {query!r} does not list {answer} first: {found[:5]}")
    for query, label in PHRASES.items():
        found = search_results(page, base, query)
        if not checks.check(bool(found), f"search for {query!r} finds nothing"):
            continue
        page.goto(base + found[0], wait_until="load")
        page.wait_for_timeout(300)  # the theme scrolls to the fragment after load
        wrong = page.evaluate(_AT_SECTION, label)
        checks.check(not wrong, f"search for {query!r}: the first result {found[0]} does not "
                                f"open at section {label}: {wrong}; then {found[1:4]}")


def check_way_out(page, checks: Checks, base: str) -> None:
    """Each warning of ``PASTED_WARNINGS``, pasted whole, finds its entry in the error index;
    each section of ``SECTIONS_SHOW`` shows its words (the variables' one as a table), each
    link of ``LINKS_TO`` is there, and every page names a favicon that loads."""
    for text, label in PASTED_WARNINGS.items():
        found = search_results(page, base, text)
        checks.check(any(href.startswith("book/errors.html") for href in found),
                     f"pasted warning {text[:50]!r}...: the error index is not found: "
                     f"{found[:5]}")
        page.goto(base + "book/errors.html", wait_until="load")
        # the page's text as shown (spaces collapsed, quotes typeset, backticks set as
        # code), process ids aside
        checks.check(page.evaluate("t => { const n = s => s.replace(/\\d+/g, 'N')"
                                   ".replace(/\\s+/g, ' ').replace(/[\u2018\u2019]/g, \"'\")"
                                   ".replace(/`/g, ''); "
                                   "return n(document.body.innerText).includes(n(t)); }", text),
                     f"book/errors.html does not quote the warning {text[:50]!r}...")
        checks.check(page.locator(f"[id='{label}']").count() == 1,
                     f"book/errors.html has no section {label}")
    for rel, label, words in SECTIONS_SHOW:
        page.goto(base + rel, wait_until="load")
        for words_shown in words:
            missing = page.evaluate(_SECTION_SHOWS, [label, words_shown])
            checks.check(not missing.replace("no picture shown; ", ""),
                         f"{rel}#{label}: {missing.replace('no picture shown; ', '')}")
        if label == "running-variables":
            checks.check(page.evaluate(_TABLE_IN, label) == 1,
                         f"{rel}#{label}: not one table of the variables")
    for rel, href in LINKS_TO:
        page.goto(base + rel, wait_until="load")
        checks.check(page.locator(f"a[href$='{href}']").count() >= 1,
                     f"{rel}: no link to {href}")
    page.goto(base + "book/intro.html", wait_until="load")
    icon = page.evaluate("() => { const l = document.querySelector('link[rel~=icon]');"
                         " return l && l.href; }")
    status = page.request.get(icon).status if icon else None
    checks.check(status == 200, f"favicon: {icon!r} answers {status}")


def check_doctor_links(checks: Checks, html: Path) -> None:
    """Each link the doctor gives (``Check.url``: the rendered book's page, at the section's
    label) names a page of this build and an id on it."""
    from ddplab.doctor.judging.checks import CHECKS

    for check in CHECKS:
        page, _, anchor = check.url.removeprefix(home.book()).partition("#")
        target = html / "book" / page
        checks.check(target.is_file() and anchor in anchors(target),
                     f"doctor check {check.id}: {check.url} is no section of the built book")


def check_panels(page, checks: Checks, rel: str) -> str:
    """Each control of each static panel changes the figure and the text."""
    sizes = page.eval_on_selector_all(".ddplab-panel", "ps => ps.map(p => p.outerHTML.length)")
    for i, size in enumerate(sizes):
        checks.check(size <= MAX_PANEL_BYTES, f"{rel}: panel {i} is {size:,} bytes")
        panel = page.locator(".ddplab-panel").nth(i)
        for j in range(panel.locator("[data-control]").count()):
            control = panel.locator("[data-control]").nth(j)
            name = control.get_attribute("name")
            before = (panel.locator("img").get_attribute("src"), panel.locator("pre").inner_text())
            start = control.input_value()
            # One step from the panel's starting point, then back: each control is judged
            # from the same point (elsewhere a move may rightly change nothing drawn: 10
            # samples on 8 ranks make one batch of 2 whether batch_size is 2 or 4).
            if control.evaluate("c => c.tagName") == "SELECT":
                count = control.locator("option").count()
                control.select_option(str((int(start) + 1) % count))
            else:
                control.focus()
                control.press("ArrowLeft" if control.get_attribute("max") == start
                              else "ArrowRight")
            after = (panel.locator("img").get_attribute("src"), panel.locator("pre").inner_text())
            checks.check(after[0] != before[0], f"{rel}: panel {i}, {name}: figure unchanged")
            checks.check(after[1] != before[1], f"{rel}: panel {i}, {name}: text unchanged")
            if control.evaluate("c => c.tagName") == "SELECT":  # back
                control.select_option(start)
            else:
                control.fill(start)  # a range input: sets it and fires its events
            checks.check(panel.locator("img").get_attribute("src") == before[0],
                         f"{rel}: panel {i}, {name}: the figure did not come back")
    return "".join(f", panel {i}: {size / 1e6:.2f} MB" for i, size in enumerate(sizes))


def check_report(chromium, checks: Checks, report: Path, shots: Path) -> None:
    """The report's one self-contained file, from disk: nothing fetched, every figure shown."""
    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    errors, fetched = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def route(r):
        url = r.request.url
        if url.startswith("data:") or url == report.as_uri():
            r.continue_()
        else:
            fetched.append(url)
            r.abort()

    page.route("**/*", route)
    page.goto(report.as_uri(), wait_until="load")
    # every figure decoded, with a size on the page, scrolled into view
    images = page.evaluate("""async () => {
        const out = [];
        for (const img of document.images) {
            img.scrollIntoView();
            try { await img.decode(); } catch (e) {}
            const box = img.getBoundingClientRect();
            out.push([img.src.slice(0, 30), img.naturalWidth, box.width * box.height]);
        }
        return out;
    }""")
    rel = f"report {report.name}"
    checks.check(not errors, f"{rel}: console errors {errors}")
    checks.check(not fetched, f"{rel}: requests beyond the file: {fetched}")
    checks.check(bool(images), f"{rel}: no figures")
    hidden = [src for src, width, area in images if width == 0 or area == 0]
    checks.check(not hidden, f"{rel}: figures not shown: {hidden}")
    page.screenshot(path=str(shots / "report.png"), full_page=True)
    print(f"{rel}: {report.stat().st_size / 1e6:.2f} MB, {len(images)} figures, nothing fetched")
    page.close()


# A panel's status line after a move: a run ("real DDP run and drawn in ...") or a run made
# ahead or before, shown at once ("shown in ... ms: a real DDP run of these values, ...").
STATUS = "text=/real DDP run (and drawn in|of these values)/"


def check_lab(chromium, checks: Checks, lab: str, url: str, shots: Path) -> None:
    start = time.perf_counter()
    page = chromium.new_page(viewport={"width": 1300, "height": 1000})
    browser.run_all(page, url)
    first = page.locator(".widget-vbox img").first.get_attribute("src")
    # Slider 0 (world size 4 -> 5 -> 4: other ranks, so a new figure each time), then
    # slider 1 (the batch size at world size 4: the figure updated in place).
    new = browser.move_and_time(page, 0, 2)
    after = page.locator(".widget-vbox img").first.get_attribute("src")
    status = page.locator(STATUS).first.inner_text()
    checks.check(after != first, f"{lab}: the figure did not change after a slider move")
    checks.check("real DDP run" in status, f"{lab}: status {status!r}")
    in_place = browser.move_and_time(page, 1, 5)
    page.screenshot(path=str(shots / "lab.png"))
    browser.shut_down_kernels(page)
    page.close()
    print(f"{lab} in JupyterLab, slider move to new figure: world size "
          f"{' and '.join(f'{t:.0f}' for t in new)} ms ({status}); batch size at world size "
          f"4, {browser.summary(in_place)}; "
          f"{time.perf_counter() - start:.0f} s in all")


def move_first_slider(chromium, checks: Checks, lab: str, url: str) -> None:
    """A lab in JupyterLab, up to its first panel (the whole lab runs under nbval): run it,
    move the first slider right and back, print the times from key press to new figure
    (printed, not asserted: the machine is shared)."""
    start = time.perf_counter()
    page = chromium.new_page(viewport={"width": 1300, "height": 1000})
    browser.run_all(page, url)
    page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=300_000)
    times = browser.move_and_time(page, 0, 2)
    status = page.locator(STATUS).first.inner_text()
    checks.check("real DDP run" in status, f"{lab}: status {status!r}")
    browser.shut_down_kernels(page)
    page.close()
    print(f"{lab} in JupyterLab, first slider moved: {' and '.join(f'{t:.0f}' for t in times)}"
          f" ms; {time.perf_counter() - start:.0f} s in all")


def check_labs(p, checks: Checks, first: str, others: list[str], shots: Path) -> None:
    """``first`` checked in full (two sliders, a screenshot), then every lab of ``others``
    with a slider panel (lab 0 has none): one JupyterLab serves them all, each cut after its
    first panel, one lab open at a time, its kernel ended before the next."""
    others = [lab for lab in others if Path(lab).resolve() != Path(first).resolve()
              and "widgets.explore" in Path(lab).read_text()]
    with browser.jupyterlab([first, *others], through_first_panel=True) as urls:
        chromium = browser.launch(p)
        for lab in [first, *others]:
            try:
                if lab == first:
                    check_lab(chromium, checks, lab, urls[lab], shots)
                else:
                    move_first_slider(chromium, checks, lab, urls[lab])
            except Exception as exc:  # one broken lab must not hide the others
                checks.check(False, f"{lab}: {type(exc).__name__}: {exc}")
        chromium.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", default=str(ROOT / "_build" / "html"))
    parser.add_argument("--screenshots", default=str(ROOT / "_build" / "screenshots"))
    parser.add_argument("--lab", default="labs/01_averaging.ipynb")
    parts = parser.add_mutually_exclusive_group()
    parts.add_argument("--no-lab", action="store_true", help="the pages and the report only")
    parts.add_argument("--labs-only", action="store_true",
                       help="the labs only: no built book needed")
    parser.add_argument("--one-lab", action="store_true", help="only --lab, no other lab")
    parser.add_argument("--report", default=str(ROOT / "_build" / "report" / "report.html"),
                        help="ddplab report's page, checked where it exists (make report)")
    args = parser.parse_args()
    html, shots = Path(args.html).resolve(), Path(args.screenshots)
    shots.mkdir(parents=True, exist_ok=True)
    checks = Checks()
    if not args.labs_only:
        check_book(checks, html, Path(args.report).resolve(), shots)
    if not args.no_lab:
        others = [] if args.one_lab else sorted((ROOT / "labs").glob("*.ipynb"))
        with sync_playwright() as p:
            check_labs(p, checks, args.lab, [str(lab) for lab in others], shots)
    print(f"screenshots in {shots}")
    print(f"{checks.passed} passed, {len(checks.failed)} failed")
    sys.exit(1 if checks.failed else 0)


def check_book(checks: Checks, html: Path, report: Path, shots: Path) -> None:
    """Every page of the built book at both widths, its search, and the report's page."""
    pages = sorted(str(f.relative_to(html)) for f in html.rglob("*.html")
                   if not f.relative_to(html).parts[0].startswith("_"))
    if not pages:
        sys.exit(f"no pages under {html}: build the book first")
    check_doctor_links(checks, html)
    server, base = serve(html)
    try:
        with sync_playwright() as p:
            chromium = browser.launch(p)
            for rel in pages:
                page = chromium.new_page(viewport=dict(zip(("width", "height"), WIDE_SCREEN)))
                try:
                    check_page(page, checks, html, base, rel, shots)
                except Exception as exc:  # one broken page must not hide the others
                    checks.check(False, f"{rel}: {type(exc).__name__}: {exc}")
                page.close()
            phone = chromium.new_page(viewport=dict(zip(("width", "height"), PHONE)))
            for rel in pages:
                try:
                    check_phone(phone, checks, base, rel, shots)
                except Exception as exc:
                    checks.check(False, f"{rel} at {PHONE[0]} px: {type(exc).__name__}: {exc}")
            phone.close()
            page = chromium.new_page()
            try:
                check_search(page, checks, base)
            except Exception as exc:
                checks.check(False, f"search: {type(exc).__name__}: {exc}")
            try:
                check_way_out(page, checks, base)
            except Exception as exc:
                checks.check(False, f"way out: {type(exc).__name__}: {exc}")
            page.close()
            if report.is_file():
                check_report(chromium, checks, report, shots)
            else:
                print(f"no report at {report}: not checked (make report writes it)")
            chromium.close()
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
