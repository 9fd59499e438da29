"""Under the doctor, experiment trackers send nothing (``ranks/scratch.py``, ``TRACKERS``).

``tracker_probe.py`` uses wandb, MLflow, Comet and the Hugging Face Hub as a reader's script
does, and lists every name it resolves, every connection beyond loopback and every process it
starts. Under the doctor it must list none but local commands (git, uname), and no tracker may
fail where a plain run would not. Run where the four are installed (they are not ddplab's
dependencies: a throwaway environment with them, torch and ddplab); skipped elsewhere. The page
names each setting the doctor makes, and the setting that only places Comet's offline archives
is not one of them.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddplab.doctor.ranks import scratch

HERE = Path(__file__).resolve().parent
PAGE = HERE.parent / "book" / "doctor.md"


def test_the_page_names_each_setting_the_doctor_makes():
    text = re.sub(r"\s+", " ", PAGE.read_text())
    assert all(name in text for name in scratch.TRACKERS), sorted(scratch.TRACKERS)
    assert "COMET_OFFLINE_DIRECTORY" not in text and "COMET_OFFLINE_DIRECTORY" not in \
        scratch.TRACKERS  # it says where offline archives go; an Experiment still sends


def _probe(tmp_path, **env) -> str:
    out, run = tmp_path / "probe.txt", tmp_path / "run"  # out: outside the script's folders
    run.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "ddplab", "doctor", str(HERE / "tracker_probe.py")],
        capture_output=True, text=True, timeout=600, cwd=run,
        env={**os.environ, "PROBE_OUT": str(out), "WANDB_API_KEY": "0" * 40, **env})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out.read_text()


def test_no_tracker_sends_anything_under_the_doctor(tmp_path):
    for name in ("wandb", "mlflow", "comet_ml", "huggingface_hub"):
        pytest.importorskip(name)
    said = _probe(tmp_path)
    tried = re.findall(r"'(\w+): (\w+) ([^']*)'", said)
    assert [t for t in tried if t[1] != "process"] == [], said  # no name resolved, no connect
    assert {os.path.basename(t[2].split()[0]) for t in tried} <= {"git", "uname"}, said
    assert said.rstrip().endswith("errors: ['hub: OfflineModeIsEnabled']"), said
