"""Nothing of the reader's is changed (``ddplab.doctor.ranks.scratch``): a script that resumes
from an existing checkpoint.pt, appends to an existing log and saves over the checkpoint runs
in a folder holding both; afterwards both hold their original bytes, nothing new is in the
folder, the script read back what it wrote (its own asserts), and the report lists what it
would have written."""

from __future__ import annotations

import hashlib

import torch

from ddplab.doctor.launch.diagnose import diagnose
from ddplab.doctor.reporting import text
from doctor_support import CORPUS


def test_the_readers_files_are_unchanged(tmp_path):
    torch.manual_seed(1)
    start = torch.nn.Linear(4, 1)
    torch.save({"model": start.state_dict(), "epoch": 6}, tmp_path / "checkpoint.pt")
    (tmp_path / "train.log").write_text("epoch 6: loss 0.5000\n")
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir()}
    diagnosis = diagnose(str(CORPUS / "resume_checkpoint.py"), cwd=str(tmp_path))
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir()}
    assert diagnosis.crash is None, diagnosis.crash.traceback  # its reads saw its writes
    assert diagnosis.steps_run == 4 and diagnosis.errors() == []
    assert after == before  # the same bytes, and no new file or folder
    written = [p.removeprefix(str(tmp_path) + "/") for p in diagnosis.writes[0]]
    assert written == ["train.log", "runs/exp1/loss.npy", "runs/exp1/last_epoch.txt",
                       "checkpoint.pt"]
    assert 1 not in diagnosis.writes  # rank 1 wrote nothing
    said = " ".join(text.report(diagnosis).split())
    assert ("your files are unchanged: what the script wrote went to a scratch folder (rank 0: "
            "train.log, runs/exp1/loss.npy, runs/exp1/last_epoch.txt, checkpoint.pt)") in said
