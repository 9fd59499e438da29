"""Where ddplab lives online, said once: the repository address of ``[project.urls]`` in
pyproject.toml (its ``Repository`` entry). Every address ddplab writes is made from it here: the
book's (the repository's GitHub Pages site), the install line, links to its source. A fork that
lives elsewhere changes that one line; ``DDPLAB_BOOK_URL`` points the book's links at another
build of the book (a local ``_build/html``, a private site) without touching the repository's.

The address is read where it is said. In a checkout (this file under ``src/ddplab/common/`` with
the project's pyproject.toml two floors above ``src``) that is pyproject.toml itself, read as
text: an editable install's metadata keeps the address it was installed with until the next
install, and Python 3.10, which ddplab supports, has no ``tomllib``. Installed from a wheel,
there is no pyproject.toml beside the package, and the address is the ``Project-URL`` line the
wheel's metadata carries (``importlib.metadata``), written from the same table when the wheel
was built. This module imports nothing of ddplab, so every floor may use it.
"""

from __future__ import annotations

import functools
import os
import pathlib
import re

DISTRIBUTION = "ddplab"
KEY = "Repository"  # the [project.urls] entry that is the home
BOOK_URL_VARIABLE = "DDPLAB_BOOK_URL"
BOOK_FOLDER = "book/"  # where the chapters' pages lie in the built site (_build/html/book/)
CHECKOUT_PYPROJECT = pathlib.Path(__file__).resolve().parents[3] / "pyproject.toml"


def urls_in_pyproject(text: str) -> dict:
    """The ``[project.urls]`` table of a pyproject.toml, its one-line ``key = "value"``
    entries."""
    urls, inside = {}, False
    for line in (raw.strip() for raw in text.splitlines()):
        if line.startswith("["):
            inside = line.split("#", 1)[0].replace(" ", "") == "[project.urls]"
        elif inside and (found := re.match(r'^"?([\w .-]+?)"?\s*=\s*"([^"]+)"', line)):
            urls[found.group(1)] = found.group(2)
    return urls


def urls_in_metadata() -> dict:
    """``Project-URL: Name, address`` lines of the installed distribution's metadata."""
    from importlib import metadata

    lines = metadata.metadata(DISTRIBUTION).get_all("Project-URL") or []
    return {name.strip(): url.strip() for name, url in (line.split(",", 1) for line in lines)}


def _in_checkout() -> bool:
    return (CHECKOUT_PYPROJECT.is_file() and
            re.search(r'(?m)^name = "ddplab"$', CHECKOUT_PYPROJECT.read_text()) is not None)


@functools.cache
def repository() -> str:
    """The repository's address, ``https://github.com/OWNER/NAME``, without a trailing /."""
    urls = urls_in_pyproject(CHECKOUT_PYPROJECT.read_text()) if _in_checkout() \
        else urls_in_metadata()
    if KEY not in urls:
        raise RuntimeError(f"ddplab's [project.urls] names no {KEY!r}: {urls}")
    return urls[KEY].rstrip("/")


def owner_and_name(address: str | None = None) -> tuple[str, str]:
    """``("OWNER", "NAME")`` of a GitHub repository address."""
    found = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?",
                         address or repository())
    if not found:
        raise ValueError(f"not a GitHub repository address: {address or repository()}")
    return found.group(1), found.group(2)


def pages_site() -> str:
    """The repository's GitHub Pages site, where the book's workflow publishes it."""
    owner, name = owner_and_name()
    return f"https://{owner.lower()}.github.io/{name}/"


def book_site() -> str:
    """The built book's root (what ``_build/html`` is served as): ``DDPLAB_BOOK_URL`` where it
    is set, else the Pages site. Read at every call, so that a run can change it."""
    given = os.environ.get(BOOK_URL_VARIABLE, "").strip()
    return given.rstrip("/") + "/" if given else pages_site()


def book() -> str:
    """The address a chapter's page is added to: ``book() + "running.html#label"``."""
    return book_site() + BOOK_FOLDER


def install_line() -> str:
    """The line that installs ddplab from its repository."""
    return f'pip install "ddplab @ git+{repository()}"'

