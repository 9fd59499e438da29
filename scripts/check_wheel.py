"""The package as PyPI and pip see it: built, checked, installed where no checkout is.

    python scripts/check_wheel.py [--keep DIR]

1. ``python -m build`` makes a wheel and an sdist of this checkout (in a folder of its own, so
   the checkout's ``dist/`` is never touched); ``twine check`` reads both as PyPI would (the
   metadata, the README as the project page).
2. A fresh venv gets torch 2.13.0, the CPU build (pip's find-links where this machine has the
   wheel, else PyTorch's CPU index: never PyPI's CUDA build), then the wheel, with the
   dependencies it declares.
3. From a folder outside the checkout, with no ``PYTHONPATH``, that venv runs
   ``python -m ddplab check`` (a real process group of 2 gloo ranks) and
   ``python -m ddplab doctor`` on the example script the wheel ships (``ddplab/doctor/
   examples/train.py``, whose mistakes the doctor must find): every link it prints is a whole
   address, the book's GitHub Pages site of the repository the wheel's metadata names, which
   is the one this checkout's pyproject.toml names (``ddplab.common.home``, read there from
   the metadata: no pyproject.toml is beside an installed wheel).

Exits non-zero on the first failure; prints each step's time. The version is said once, as
``ddplab.__version__``, which pyproject.toml reads; the wheel's name and its metadata carry it.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src", "ddplab")
# The checkout's version and home, read without importing ddplab (and torch with it): home
# imports nothing of ddplab, and the version is the one line __init__.py says it in.
__version__ = re.search(r'(?m)^__version__ = "([^"]+)"$',
                        open(os.path.join(SRC, "__init__.py")).read()).group(1)
_spec = importlib.util.spec_from_file_location("home", os.path.join(SRC, "common", "home.py"))
home = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(home)

TORCH = "torch==2.13.0"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# What the venv's Python says about the installed ddplab: its version, file and home.
INSPECT = ("import ddplab, pathlib; from ddplab.common import home; "
           "print(ddplab.__version__); print(pathlib.Path(ddplab.__file__).parent); "
           "print(home.repository()); print(home.book())")


def clean_env() -> dict:
    """This environment less ``PYTHONPATH`` and ``DDPLAB_BOOK_URL``: the installed package
    alone, with its own addresses."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", home.BOOK_URL_VARIABLE)}


def sh(*command: str, cwd: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, cwd=cwd, env=clean_env(), capture_output=True, text=True)
    if check and done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-4000:], sep="\n")
        raise SystemExit(f"check-wheel: failed ({done.returncode}): {' '.join(command)}")
    return done


class Steps:
    def __init__(self):
        self.times = []

    def timed(self, name: str, fn):
        start = time.perf_counter()
        result = fn()
        self.times.append((name, time.perf_counter() - start))
        print(f"==== check-wheel: {name}: {self.times[-1][1]:.1f} s", flush=True)
        return result


def build(out: str) -> tuple[str, str]:
    sh(sys.executable, "-m", "build", "--outdir", out, ROOT)
    wheels = glob.glob(os.path.join(out, f"ddplab-{__version__}-py3-none-any.whl"))
    sdists = glob.glob(os.path.join(out, f"ddplab-{__version__}.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise SystemExit(f"check-wheel: expected one wheel and one sdist of {__version__} in "
                         f"{out}: {os.listdir(out)}")
    sh(sys.executable, "-m", "twine", "check", "--strict", wheels[0], sdists[0])
    return wheels[0], sdists[0]


def install(venv: str, wheel: str) -> str:
    python = os.path.join(venv, "bin", "python")
    sh(sys.executable, "-m", "venv", venv)
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if sh(*pip, f"{TORCH}+cpu", check=False).returncode != 0:
        sh(*pip, TORCH, "--index-url", TORCH_CPU_INDEX)
    sh(*pip, wheel)
    return python


def use(python: str, work: str) -> None:
    version, folder, repository, book = sh(python, "-c", INSPECT, cwd=work).stdout.split()
    if version != __version__ or not folder.startswith(os.path.dirname(os.path.dirname(python))):
        raise SystemExit(f"check-wheel: the venv imports ddplab {version} from {folder}")
    if repository != home.repository() or not book.startswith(home.pages_site()):
        raise SystemExit(f"check-wheel: the wheel's home is {repository} ({book}), the "
                         f"checkout's {home.repository()}")
    checked = sh(python, "-m", "ddplab", "check", "--world-size", "2", cwd=work).stdout
    if not checked.rstrip().endswith("OK"):
        raise SystemExit(f"check-wheel: ddplab check did not end in OK:\n{checked}")
    example = os.path.join(work, "train.py")
    with open(os.path.join(folder, "doctor", "examples", "train.py")) as f, \
            open(example, "w") as g:
        g.write(f.read())
    doctor = sh(python, "-m", "ddplab", "doctor", example, cwd=work, check=False)
    links = [line.split("book: ", 1)[1] for line in doctor.stdout.splitlines()
             if line.strip().startswith("book: ")]
    whole = re.compile(re.escape(book) + r"[a-z_]+\.html#[a-z0-9-]+$")
    if doctor.returncode != 1 or not links or not all(whole.match(link) for link in links):
        print(doctor.stdout[-4000:], doctor.stderr[-4000:], sep="\n")
        raise SystemExit(f"check-wheel: the doctor exited {doctor.returncode}, with links "
                         f"{links}, not whole addresses under {book}")
    print(f"ddplab check: OK; ddplab doctor: exit 1 and {len(links)} findings, each linked to "
          f"{book}...")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="work in this folder and leave it (else a temporary one)")
    args = parser.parse_args()
    steps, start = Steps(), time.perf_counter()
    work = os.path.abspath(args.keep or tempfile.mkdtemp(prefix="ddplab-wheel-"))
    try:
        os.makedirs(os.path.join(work, "run"), exist_ok=True)
        wheel, _ = steps.timed("build and twine check", lambda: build(os.path.join(work, "dist")))
        python = steps.timed("fresh venv, torch and the wheel",
                             lambda: install(os.path.join(work, "venv"), wheel))
        steps.timed("check and doctor from the wheel",
                    lambda: use(python, os.path.join(work, "run")))
    finally:
        if not args.keep:
            steps.timed("removing the venv", lambda: shutil.rmtree(work, ignore_errors=True))
    print(f"check-wheel: OK in {time.perf_counter() - start:.0f} s ("
          + ", ".join(f"{name} {s:.0f} s" for name, s in steps.times) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
