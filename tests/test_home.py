"""One home: pyproject.toml's ``[project.urls]`` names the repository once, and every address
the book, the doctor and the report write is made from it (``ddplab.common.home``); with the
home moved to a fork, no address of the old one is left in what they write, and
``DDPLAB_BOOK_URL`` (the doctor's ``--book-url``) moves every link to the book. What cannot be
made at run time, the install lines a reader copies before ddplab is installed, is held to it
here."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import nbformat
import pytest
import yaml

from ddplab.common import home
from ddplab.doctor.judging.checks import CHECKS
from ddplab.doctor.judging.findings import Diagnosis, Finding, Verdict
from ddplab.doctor.reporting import output
from ddplab.doctor.reporting import page as doctor_page
from ddplab.report import page as report_page
from ddplab.report import stages

ROOT = pathlib.Path(__file__).resolve().parent.parent
FORK = "https://github.com/Someone/ddplab-fork"
LOCAL_BOOK = "http://127.0.0.1:8000/"
ADDRESS = re.compile(r"""(?:https?|file)://[^\s"'<>)\]\\]+""")
# An address of this project: its repository or its Pages site, under any owner.
PROJECT = re.compile(r"github\.com/[^/\s]+/ddplab|\.github\.io/ddplab", re.IGNORECASE)


def written(tmp_path) -> dict[str, str]:
    """Everything the doctor and the report write that links somewhere: the doctor's four
    formats and its page, for every check found once; every top-level section of the report."""
    script = str(tmp_path / "train.py")
    verdicts = [Verdict(c.id, c.kind, "found", c.checks, [Finding(
        c.id, c.kind, "found", {}, script, 10, c.section, c.url, c.fix)]) for c in CHECKS]
    made = Diagnosis(script, 2, "gloo", "gloo", 8, "stopped", verdicts, root=str(tmp_path))
    out = {f"doctor {f}": output.rendered(made, f) for f in output.FORMATS}
    out["doctor page"] = doctor_page.render(made)
    out["report page"] = "\n".join(line for stage in stages.STAGES if stage.parent is None
                                   for line in report_page.stage_section(stage, None, []))
    return out


@pytest.fixture
def forked(monkeypatch):
    """The home moved: a fork's repository, as pyproject.toml would name it."""
    monkeypatch.delenv(home.BOOK_URL_VARIABLE, raising=False)
    monkeypatch.setattr(home, "repository", lambda: FORK)


def test_the_home_is_pyprojects_repository():
    urls = home.urls_in_pyproject((ROOT / "pyproject.toml").read_text())
    assert home.repository() == urls[home.KEY].rstrip("/")
    owner, name = home.owner_and_name()
    assert home.book() == f"https://{owner.lower()}.github.io/{name}/book/"
    assert home.install_line() == f'pip install "ddplab @ git+{urls[home.KEY]}"'


def test_an_installed_ddplab_reads_the_same_home_from_its_metadata():
    """A wheel has no pyproject.toml beside it: its ``Project-URL`` lines are read instead
    (here the editable install's, written from the same table)."""
    assert home.urls_in_metadata()[home.KEY].rstrip("/") == home.repository()


def test_every_link_the_doctor_and_the_report_write_follows_the_home(forked, tmp_path):
    owner, name = home.owner_and_name(FORK)
    for where, text in written(tmp_path).items():
        addresses = ADDRESS.findall(text)
        ours = [a for a in addresses if PROJECT.search(a)]
        assert ours, f"{where} links nowhere of ours"
        stale = [a for a in ours if not a.startswith(
            (FORK, f"https://{owner.lower()}.github.io/{name}/"))]
        assert not stale, f"{where}: {stale} not made from the home {FORK}"
        assert "github.com/ddplab/" not in text and "ddplab.github.io" not in text, where


def test_ddplab_book_url_moves_every_link_to_the_book(monkeypatch, tmp_path):
    monkeypatch.setenv(home.BOOK_URL_VARIABLE, LOCAL_BOOK)
    for where, text in written(tmp_path).items():
        to_book = [a for a in ADDRESS.findall(text) if "/book/" in a or a.endswith("/book")]
        assert to_book, f"{where} links to no page of the book"
        assert all(a.startswith(LOCAL_BOOK + "book/") for a in to_book), (where, to_book)


def test_the_doctor_run_with_book_url_prints_and_writes_whole_addresses_there(tmp_path):
    """A real run of the packaged example: every link in its text, JSON and page is a whole
    address under ``--book-url``."""
    example = ROOT / "src" / "ddplab" / "doctor" / "examples" / "train.py"
    done = subprocess.run([sys.executable, "-m", "ddplab", "doctor", "--book-url", LOCAL_BOOK,
                           "--out", str(tmp_path), str(example)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]  # the example's mistakes found
    links = [line.split("book: ", 1)[1] for line in done.stdout.splitlines()
             if line.strip().startswith("book: ")]
    page = (tmp_path / "doctor.html").read_text()
    urls = re.findall(r'"url": "([^"]+)"', json.dumps(
        json.loads((tmp_path / "doctor.json").read_text())))
    assert links and urls and sorted(set(links)) == sorted(set(urls))
    assert all(u.startswith(LOCAL_BOOK + "book/") for u in links + ADDRESS.findall(page))


def sources() -> dict[str, str]:
    """The text of the book's pages and configuration, the labs, the README."""
    found = {str(p.relative_to(ROOT)): p.read_text() for p in
             [*sorted((ROOT / "book").glob("*.md")), ROOT / "_config.yml", ROOT / "README.md"]}
    for lab in sorted((ROOT / "labs").glob("*.ipynb")):
        cells = nbformat.read(lab, as_version=4).cells
        found[str(lab.relative_to(ROOT))] = "\n".join(c.source for c in cells)
    return found


def test_every_address_of_ours_in_the_books_sources_is_the_homes():
    """The install lines a reader copies (the book's, the README's, each lab's Colab cell) are
    text, not made at run time: each must be the home's."""
    made = (home.repository(), home.pages_site())
    wrong = {where: a for where, text in sources().items() for a in ADDRESS.findall(text)
             if PROJECT.search(a) and not (a.removeprefix("git+") in made
                                           or a.startswith(tuple(m.rstrip("/") + "/"
                                                                 for m in made)))}
    assert not wrong, f"addresses of this project not made from {home.repository()}: {wrong}"
    install = re.compile(r'git\+(https://[^"\s]+)')
    lines = {where: install.findall(text) for where, text in sources().items()}
    assert {a for found in lines.values() for a in found} == {home.repository()}
    assert "url" not in yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]


def test_the_books_buttons_take_the_homes_repository():
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    try:
        import ddplab_book
    finally:
        sys.path.remove(str(ROOT / "book" / "_ext"))

    class Config:
        html_theme_options = {"repository_url": "https://github.com/executablebooks/x"}

    ddplab_book.repository_from_home(None, Config)
    assert Config.html_theme_options["repository_url"] == home.repository()
    assert Config.html_theme_options["use_repository_button"] is True
