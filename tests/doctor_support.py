"""What the doctor's tests share: the corpus folder, running a script under the doctor with a
mark in its environment, finding any process left with that mark, and the checkout's status
that a run must leave as it found it."""

from __future__ import annotations

import os
import pathlib
import subprocess
import uuid

CORPUS = pathlib.Path(__file__).parent / "doctor_corpus"
MARK = "DDPLAB_DOCTOR_TEST_MARK"


def new_mark() -> str:
    return uuid.uuid4().hex


def processes_with(mark: str) -> list[int]:
    """Every process whose environment carries ``MARK=mark`` (the doctor's zygote, its ranks,
    what they started): none may be left after a run."""
    found, needle = [], f"{MARK}={mark}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:  # gone, or not ours to read
            continue
    return found


def checkout_status() -> str:
    """``git status --porcelain`` of this checkout, untracked files included: a test that runs
    scripts compares it before and after, so a script's ``torch.save("model.pt")`` that landed
    in the checkout instead of the test's folder fails the test."""
    root = pathlib.Path(__file__).parent.parent
    return subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                           "--untracked-files=all"], capture_output=True, text=True,
                          check=True).stdout
