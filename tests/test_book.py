"""The book's wiring: labs install from the home's repository (pyproject.toml's, read by
``ddplab.common.home``), chapters name real labs,
the intro's questions link to the sections that settle them."""

import glob
import os
import re

import nbformat
import yaml

from ddplab.common import home

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def front_matter(path):
    with open(path) as f:
        text = f.read()
    return yaml.safe_load(text.split("---")[1]) if text.startswith("---") else {}


def test_every_lab_installs_ddplab_from_the_books_repository_in_colab():
    url = home.repository()
    for path in sorted(glob.glob(os.path.join(ROOT, "labs", "*.ipynb"))):
        nb = nbformat.read(path, as_version=4)
        first = next(c for c in nb.cells if c.cell_type == "code").source
        assert '"google.colab" in sys.modules' in first, path
        assert f"git+{url}" in first, f"{path}: install URL differs from the home's {url}"


def test_every_chapter_names_a_lab_that_exists():
    with open(os.path.join(ROOT, "_toc.yml")) as f:
        toc = yaml.safe_load(f)
    chapters = [c["file"] for part in toc["parts"] if part.get("numbered")
                for c in part["chapters"]]
    assert chapters
    for chapter in chapters:
        lab = front_matter(os.path.join(ROOT, chapter + ".md")).get("lab")
        assert lab and os.path.exists(os.path.join(ROOT, lab)), f"{chapter}: lab {lab!r}"


def labels_by_page() -> dict[str, list[str]]:
    """Each page's ``(label)=`` targets, by page name (``book/<page>.md``), each with the line
    that follows it."""
    found = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "book", "*.md"))):
        with open(path) as f:
            lines = f.read().splitlines()
        page = os.path.basename(path)[:-3]
        found[page] = [(m.group(1), next((n for n in lines[i + 1:] if n.strip()), ""))
                       for i, line in enumerate(lines)
                       if (m := re.fullmatch(r"\(([a-z0-9-]+)\)=", line))]
    return found


def question_rows(intro: str) -> list[tuple[str, list[str]]]:
    """The intro's table of questions: (the question, the labels it links to) per row."""
    table = intro.split("## The questions, and where they are settled", 1)[1]
    rows = [line for line in table.split("\n\n")[1].splitlines() if line.startswith("|")][2:]
    return [(cells[0].strip(), [m.group(2) or m.group(1) for m in  # `text <label>` too
                                re.finditer(r"\{ref\}`([^`<]+?)(?: <([^`>]+)>)?`", cells[1])])
            for cells in (row.strip("|").rsplit("|", 1) for row in rows)]


def intro_problems(intro: str, pages: dict, chapters: list[str]) -> list[str]:
    """What is wrong with the intro's table: a row with no question or no link, a link to a
    label no page defines (or two define, or that stands before no heading), a chapter that no
    question is settled in."""
    where = {}
    for page, labels in pages.items():
        for label, after in labels:
            where.setdefault(label, []).append((page, after))
    problems, settled_in = [], set()
    for question, links in question_rows(intro):
        if not question or not links:
            problems.append(f"a row without a question or a link: {question!r} {links}")
        for label in links:
            if len(where.get(label, [])) != 1:
                problems.append(f"{label!r} is defined on {len(where.get(label, []))} pages")
                continue
            page, after = where[label][0]
            if not after.startswith("#"):
                problems.append(f"{label!r} ({page}.md) stands before no heading: {after!r}")
            settled_in.add(page)
    problems += [f"no question of the intro is settled in {page}.md"
                 for page in chapters if page not in settled_in]
    return problems


def test_the_intros_questions_link_to_real_sections_and_every_chapter_settles_some():
    with open(os.path.join(ROOT, "_toc.yml")) as f:
        toc = yaml.safe_load(f)
    chapters = [c["file"].removeprefix("book/") for part in toc["parts"] if part.get("numbered")
                for c in part["chapters"]] + ["errors", "doctor"]
    with open(os.path.join(ROOT, "book", "intro.md")) as f:
        intro = f.read()
    pages = labels_by_page()
    assert len(question_rows(intro)) >= 20
    assert intro_problems(intro, pages, chapters) == []
    # the check can fail: a link to a missing label, a chapter no row reaches
    broken = intro.replace("{ref}`hangs-batchnorm`", "{ref}`hangs-batch-norm`")
    assert intro_problems(broken, pages, chapters) == [
        "'hangs-batch-norm' is defined on 0 pages"]
    fewer = "\n".join(line for line in intro.splitlines() if "{ref}`training-loop" not in line)
    assert "no question of the intro is settled in training_loop.md" in intro_problems(
        fewer, pages, chapters)


INSTALL_PAGES = ("intro", "running", "doctor")


def test_the_install_box_is_on_the_pages_a_reader_starts_from_and_says_what_pip_does():
    """One box (book/_install.md) on the intro, running and doctor pages: the cluster page's
    and the README's line, and the torch it names is requirements.txt's lowest."""
    def read(*parts):
        with open(os.path.join(ROOT, *parts)) as f:
            return f.read()
    box = read("book", "_install.md")
    line = re.search(r"^pip install .+$", box, re.M).group(0)
    for page in INSTALL_PAGES:
        assert "```{include} _install.md" in read("book", f"{page}.md"), page
    assert line in read("book", "your_cluster.md") and line in read("README.md")
    assert line == home.install_line()
    floor = re.search(r"^torch>=([0-9.]+)$", read("requirements.txt"), re.M).group(1)
    assert f"torch {floor} or newer" in box and f"older than {floor}" in box
    # torch's own floor of Python, as the wheels here declare it
    from importlib.metadata import metadata
    python = metadata("torch")["Requires-Python"].removeprefix(">=")
    assert f"Python {python} or newer" in box
