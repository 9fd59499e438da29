"""The book's wiring: labs install from the repository in _config.yml, chapters name real labs."""

import glob
import os

import nbformat
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config():
    with open(os.path.join(ROOT, "_config.yml")) as f:
        return yaml.safe_load(f)


def front_matter(path):
    with open(path) as f:
        text = f.read()
    return yaml.safe_load(text.split("---")[1]) if text.startswith("---") else {}


def test_every_lab_installs_ddplab_from_the_books_repository_in_colab():
    url = config()["repository"]["url"]
    for path in sorted(glob.glob(os.path.join(ROOT, "labs", "*.ipynb"))):
        nb = nbformat.read(path, as_version=4)
        first = next(c for c in nb.cells if c.cell_type == "code").source
        assert '"google.colab" in sys.modules' in first, path
        assert f"git+{url}" in first, f"{path}: install URL differs from _config.yml's {url}"


def test_every_chapter_names_a_lab_that_exists():
    with open(os.path.join(ROOT, "_toc.yml")) as f:
        toc = yaml.safe_load(f)
    chapters = [c["file"] for part in toc["parts"] if part.get("numbered")
                for c in part["chapters"]]
    assert chapters
    for chapter in chapters:
        lab = front_matter(os.path.join(ROOT, chapter + ".md")).get("lab")
        assert lab and os.path.exists(os.path.join(ROOT, lab)), f"{chapter}: lab {lab!r}"
