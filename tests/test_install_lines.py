"""``your_cluster.md``'s install lines say what ddplab's requirements say: the oldest torch it
keeps, and every other requirement for an install without dependencies."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_pages_install_lines_match_the_requirements():
    requirements = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()
                    if line.strip() and not line.startswith("#")]
    page = (ROOT / "book" / "your_cluster.md").read_text()
    torch = next(r for r in requirements if r.startswith("torch"))
    assert f"`{torch}`" in page
    assert f"torch {torch.removeprefix('torch>=')} or newer" in " ".join(page.split())
    others = re.search(r'pip install --no-deps .*\npip install (.*)\n', page).group(1)
    assert sorted(others.replace('"', "").split()) == sorted(r for r in requirements
                                                            if r != torch)
