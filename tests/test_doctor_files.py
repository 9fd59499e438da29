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


def test_a_script_in_the_temporary_folder_itself_keeps_the_doctors_files_its_own():
    """The temporary folder is the reader's when the script lies in it: the doctor's own
    files there (the reference run's records) still go where the doctor put them, and the
    clean script is clean (they went to the scratch folder, and the run crashed, before)."""
    import os
    import shutil
    import tempfile
    import uuid

    script = os.path.join(tempfile.gettempdir(), f"ddplab-test-{uuid.uuid4().hex}.py")
    shutil.copy(CORPUS / "plain_clean.py", script)
    try:
        diagnosis = diagnose(script, cwd=tempfile.gettempdir())
    finally:
        os.remove(script)
    assert diagnosis.crash is None, diagnosis.crash.traceback
    assert diagnosis.findings == [] and diagnosis.steps_run == 8
    reference = next(v for v in diagnosis.checks if v.id == "reference-differs")
    assert reference.status == "passed", reference.why
