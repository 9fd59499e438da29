"""The listings the book offers for copying, read from the pages' own text, and run as pasted.

A listing is offered for copying when its directive carries the class ``to-copy`` (a whole
script: ``to-copy whole-script``), in a page of ``book/``:

    ```{literalinclude} ../src/ddplab/chapters/memory/strategies.py
    ---
    pyobject: zero1_optimizer
    class: to-copy
    prepend: |
      import torch
    ---
    ```

or a ``{code-block} python`` with the same class. The page renders it under a "for your
script" tag (``_static/ddplab.css``). Its text here is what the page shows: a literalinclude is
read with Sphinx's own ``LiteralIncludeReader`` and the directive's options (``pyobject``,
``prepend`` for the imports the page shows, ``start-at`` ...), so a helper defined elsewhere in
the module, or an import the module has and the page does not show, is missing here too.

``run_function`` writes the text (after the texts of the listings it needs, on the same page) to
``listing.py`` and starts ``world_size`` fresh interpreters with the environment torchrun gives
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), each of which
imports ``listing`` before anything else and then runs a driver: the test's calls and checks.
``run_script`` starts a whole script under torchrun. gloo on CPU ranks, as on this machine.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml
from sphinx.directives.code import LiteralIncludeReader

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
MARK, SCRIPT = "to-copy", "whole-script"

_DIRECTIVE = re.compile(r"^```\{(literalinclude|code-block)\} *([^\n]*)\n(.*?)^```$", re.M | re.S)


@dataclasses.dataclass(frozen=True)
class Listing:
    page: str  # "memory" for book/memory.md
    name: str  # the pyobject, or the first name the text defines
    text: str  # as the page shows it
    classes: tuple[str, ...]
    line: int  # of the directive in the page

    @property
    def for_copying(self) -> bool:
        return MARK in self.classes

    @property
    def whole_script(self) -> bool:
        return SCRIPT in self.classes

    @property
    def key(self) -> str:
        return f"{self.page}:{self.name}"


class _Config:  # what LiteralIncludeReader reads of Sphinx's config
    source_encoding = "utf-8-sig"


def _options(body: str) -> tuple[dict, str]:
    """A directive's options (``:key: value`` lines or a ``---`` YAML block) and its content."""
    if body.startswith("---\n"):
        block, _, rest = body[4:].partition("\n---\n")
        return yaml.safe_load(block) or {}, rest
    options, lines = {}, body.splitlines(keepends=True)
    while lines and (m := re.match(r"^:([\w-]+):\s?(.*)$", lines[0])):
        options[m.group(1)] = m.group(2)
        lines.pop(0)
    return options, "".join(lines)


def read_page(path: Path) -> list[Listing]:
    """Every literalinclude and code-block of the page at ``path``, as the page shows it."""
    text, found = path.read_text(), []
    for m in _DIRECTIVE.finditer(text):
        kind, argument, (options, content) = m.group(1), m.group(2).strip(), _options(m.group(3))
        options = {k: ("" if v is None else str(v)) for k, v in options.items()}
        if kind == "literalinclude":
            source = (path.parent / argument).resolve()
            shown, _ = LiteralIncludeReader(str(source), options, _Config()).read()
        elif argument in ("python", "python3", "ipython3"):
            shown = content
        else:
            continue
        name = options.get("pyobject") or options.get("name") or _first_name(shown) or "?"
        found.append(Listing(path.stem, name, shown, tuple(options.get("class", "").split()),
                             text.count("\n", 0, m.start()) + 1))
    return found


def _first_name(code: str) -> str | None:
    m = re.search(r"^(?:def|class) (\w+)", code, re.M)
    return m.group(1) if m else None


def collect(book: Path = BOOK) -> list[Listing]:
    """Every listing offered for copying, page by page."""
    return [listing for page in sorted(book.glob("*.md")) for listing in read_page(page)
            if listing.for_copying]


def fragments(book: Path = BOOK) -> list[tuple[str, int, str]]:
    """Every fenced ```python block (a fragment to edit into a script, not offered whole):
    page, line, text."""
    out = []
    for page in sorted(book.glob("*.md")):
        text = page.read_text()
        for m in re.finditer(r"^```python\n(.*?)^```$", text, re.M | re.S):
            out.append((page.stem, text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


# ---------------------------------------------------------------- running a listing

_PREAMBLE = """\
import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import listing as L  # noqa: E402  the page's text, first, in a fresh interpreter

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
device = torch.device("cpu")
torch.set_num_threads(1)
if world_size > 1:  # a gloo group; rank 0's store listens on the socket the test bound
    fd = int(os.environ.get("LISTING_STORE_FD", "-1"))
    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), world_size, rank == 0,
                          **({"master_listen_fd": fd} if rank == 0 else {}))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
"""

_EPILOGUE = """
if dist.is_initialized():
    dist.destroy_process_group()
print(f"rank {rank}: the listing ran")
"""


def _env(rank: int, world_size: int, port: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDPLAB_")}
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
               LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)  # nothing of ddplab: the page's text only
    return env


def run_function(code: str, driver: str, folder: Path, world_size: int = 2,
                 timeout: float = 180) -> list[subprocess.CompletedProcess]:
    """``code`` as ``listing.py``, and ``driver`` run after it on ``world_size`` fresh
    interpreters (``L`` is the listing's module; ``rank``, ``world_size``, ``device`` are set,
    and a gloo group is formed when ``world_size`` > 1). Returns each rank's completed process;
    a rank still running at ``timeout`` is killed with its children."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "listing.py").write_text(code)
    (folder / "drive.py").write_text(_PREAMBLE + textwrap.dedent(driver) + _EPILOGUE)
    return _start(folder, world_size, timeout)


def _start(folder: Path, world_size: int, timeout: float) -> list[subprocess.CompletedProcess]:
    """``drive.py`` in ``folder`` on ``world_size`` fresh interpreters, rank 0's store on a
    socket bound here to 127.0.0.1; each rank's completed process."""
    with socket.socket() as listen:
        listen.bind(("127.0.0.1", 0))
        listen.listen()
        port = listen.getsockname()[1]
        procs = []
        for rank in range(world_size):
            env = _env(rank, world_size, port)
            fds = ()
            if rank == 0:
                env["LISTING_STORE_FD"], fds = str(listen.fileno()), (listen.fileno(),)
            procs.append(subprocess.Popen(
                [sys.executable, str(folder / "drive.py")], cwd=folder, env=env,
                pass_fds=fds, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                start_new_session=True))
    return [_wait(p, timeout) for p in procs]


_EACH = """
import importlib  # noqa: E402

for _i, _name in enumerate({names!r}):
    L = importlib.import_module(f"listing_{{_i}}")  # this run's text alone, a module of its own
    exec(open(f"drive_{{_i}}.py").read(), {{
        "L": L, "rank": rank, "world_size": world_size, "device": device, "torch": torch,
        "dist": dist, "os": os, "sys": sys, "__name__": f"drive_{{_i}}"}})
    print(f"rank {{rank}}: {{_name}} ran", flush=True)
"""


def run_functions(runs: list[tuple[str, str, str]], folder: Path, world_size: int = 2,
                  timeout: float = 300) -> list[subprocess.CompletedProcess]:
    """Several ``(name, code, driver)`` one after another on the same ``world_size`` fresh
    interpreters and gloo group, as :func:`run_function` runs one: each code is a module of
    its own (``listing_<i>``), so a name its text never defines fails as it would alone; each
    driver runs in a namespace of its own with ``L``, ``rank``, ``world_size``, ``device``,
    ``torch``, ``dist``. A rank prints ``rank <r>: <name> ran`` after each. One pair of
    interpreters per page rather than per listing: starting them (torch's import) was most of
    each listing's 6-10 s."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, (_, code, driver) in enumerate(runs):
        (folder / f"listing_{i}.py").write_text(code)
        (folder / f"drive_{i}.py").write_text(textwrap.dedent(driver))
    (folder / "listing.py").write_text("")  # the preamble's own import: nothing
    (folder / "drive.py").write_text(_PREAMBLE + _EACH.format(names=[n for n, _, _ in runs])
                                     + _EPILOGUE)
    return _start(folder, world_size, timeout)


def run_script(code: str, folder: Path, world_size: int = 2,
               timeout: float = 300) -> subprocess.CompletedProcess:
    """``code`` as ``script.py`` under torchrun, ``world_size`` processes on this machine."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "script.py").write_text(code)
    env = _env(0, 1, 0)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT"):
        env.pop(name)
    proc = subprocess.Popen([TORCHRUN, "--standalone", "--nproc-per-node", str(world_size),
                             "script.py"], cwd=folder, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    return _wait(proc, timeout)


def _wait(proc: subprocess.Popen, timeout: float) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n(killed after {timeout} s)"
        return subprocess.CompletedProcess(proc.args, -9, out, err)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
