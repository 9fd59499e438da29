"""A chapter is registered once, by its package under ``ddplab.chapters``: its page in
``_toc.yml``, its lab (named in the page's front matter ``lab:``), its tests and its CLI commands
all carry the same word."""

import pathlib
import re

import yaml

from ddplab import chapters

ROOT = pathlib.Path(__file__).resolve().parents[1]


def toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [entry["file"].removeprefix("book/") for part in toc["parts"]
            for entry in part["chapters"]]


def front_matter_lab(page: str) -> str | None:
    text = (ROOT / "book" / f"{page}.md").read_text()
    head = re.match(r"---\n(.*?)\n---\n", text, re.S)
    return yaml.safe_load(head.group(1)).get("lab") if head else None


def test_every_chapter_package_has_a_page_a_lab_and_tests():
    pages = toc_pages()
    for chapter in chapters.names():
        assert chapter in pages, f"chapter package {chapter!r} has no page in _toc.yml"
        lab = front_matter_lab(chapter)
        assert lab is not None, f"book/{chapter}.md names no lab in its front matter"
        assert re.fullmatch(rf"labs/\d\d_{chapter}\.ipynb", lab), lab
        assert (ROOT / lab).exists(), f"book/{chapter}.md names {lab}, which does not exist"
        assert list((ROOT / "tests").glob(f"test_{chapter}*.py")), f"no tests/test_{chapter}*.py"


def test_every_page_with_a_lab_and_every_lab_is_a_chapter():
    names = set(chapters.names())
    with_lab = {page for page in toc_pages() if front_matter_lab(page)}
    assert with_lab == names
    labs = {re.fullmatch(r"\d\d_(\w+)\.ipynb", p.name).group(1)
            for p in (ROOT / "labs").glob("*.ipynb")}
    assert labs == names


def test_cli_commands_are_found_in_the_chapters_and_each_belongs_to_one():
    commands = chapters.commands()
    assert {"check", "averaging", "buckets", "uneven"} <= set(commands)
    for command, module in commands.items():
        assert module.__name__.split(".")[2] in chapters.names()
        assert module.COMMAND == command


# The rule is one concept per file, named after it, not a size: a concept cut in two by a size
# rule leaves halves that reach into each other's private state, worse than a long file. A file
# over 300 lines is rare and says here which one concept it holds and why it stays whole; none
# passes LONGEST lines. None is over 300 lines now.
LONGER: dict[str, str] = {
    "src/ddplab/doctor/ranks/scratch.py": "the scratch view, one concept: where a write lands "
    "and every call that reads, lists or renames must see the same merged folder; cut in two, "
    "one call would see half of it",
    "src/ddplab/doctor/ranks/watch/data.py": "the loaders watched, one concept: a pass, its "
    "cut at the doctor's steps, the epochs after it and the sampler's order are one iterator's "
    "state, which every part reads",
    "src/ddplab/chapters/running/two_nodes.py": "two torchrun nodes on one machine, one "
    "concept: the run, the ways a node fails to join and the node-rank order share one agent "
    "command, one environment and the store on loopback",
}
LONGEST = 400


def test_a_module_over_300_lines_is_one_concept_with_its_reason_named():
    lines = {path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
             for path in (ROOT / "src" / "ddplab").rglob("*.py")}
    over = {path: n for path, n in lines.items() if n > 300}
    assert set(over) <= set(LONGER), f"over 300 lines, with no reason in LONGER: {over}"
    assert {path: n for path, n in over.items() if n > LONGEST} == {}
    assert set(LONGER) <= set(lines), "an exception names a module that is gone"
    assert max(lines.values()) > 100  # the files were found and read
