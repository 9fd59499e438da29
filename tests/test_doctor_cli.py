"""``python -m ddplab doctor`` from the command line: bad input (exit 2 before anything
starts), a hang named within the timeout with no process left, the JSON and the page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ddplab.doctor.launch import diagnose as diagnose_module
from ddplab.doctor.launch.inputs import BadInput
from doctor_support import CORPUS, MARK, new_mark, processes_with


def doctor(*args, cwd, mark=None, timeout=300):
    env = dict(os.environ, **({MARK: mark} if mark else {}))
    return subprocess.run([sys.executable, "-m", "ddplab", "doctor", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


@pytest.fixture
def no_zygote(monkeypatch):
    """Bad input must be refused before any process starts: starting one fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("a process was started for bad input")
    monkeypatch.setattr(diagnose_module, "Zygote", refuse)


@pytest.mark.parametrize("make,words", [
    (lambda d: d / "missing.py", "no such file"),
    (lambda d: d, "is a folder"),
    (lambda d: (d / "broken.py").write_text("def f(:\n") and d / "broken.py",
     "does not compile"),
])
def test_bad_script_is_refused_before_anything_starts(tmp_path, no_zygote, make, words):
    with pytest.raises(BadInput, match=words):
        diagnose_module.diagnose(str(make(tmp_path)))


def test_bad_numbers_are_refused(tmp_path, no_zygote):
    script = CORPUS / "plain_clean.py"
    for settings in ({"world_size": 0}, {"steps": 0}, {"timeout": -1}):
        with pytest.raises(ValueError):
            diagnose_module.diagnose(str(script), **settings)


def test_cli_exit_2_on_bad_input(tmp_path):
    (tmp_path / "broken.py").write_text("x = (\n")
    done = doctor("broken.py", cwd=tmp_path)
    assert done.returncode == 2
    assert "broken.py:1" in done.stderr and "does not compile" in done.stderr
    assert doctor("missing.py", cwd=tmp_path).returncode == 2


def test_a_hang_is_named_and_nothing_is_left(tmp_path):
    mark = new_mark()
    started = time.perf_counter()
    done = doctor("--timeout", 2, CORPUS / "plain_rank0_barrier.py", cwd=tmp_path, mark=mark)
    seconds = time.perf_counter() - started
    print(f"the doctor named the hang and ended in {seconds:.1f} s (timeout 2 s)")
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join(done.stdout.split())  # the lines are wrapped
    assert "error collective-on-some-ranks" in said
    assert "rank 0 waits in barrier #1 at" in said
    assert "rank 1 has finished the script" in said
    assert processes_with(mark) == []


def test_json_and_page(tmp_path):
    """The one run of the tutorial from the command line: what the report says is held by the
    corpus tests, which render every format from the same script's diagnosis."""
    out = tmp_path / "report"
    done = doctor("--json", "--out", out, CORPUS / "tutorial_torchrun.py", 3, 1, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["exit_code"] == 1 and data["steps_run"] == 8
    assert "sampler-set-epoch" in {f["id"] for f in data["findings"]}
    assert json.loads((out / "doctor.json").read_text()) == data
    assert "sampler.set_epoch(epoch)" in (out / "doctor.html").read_text()
    assert f"written: {out / 'doctor.html'} and {out / 'doctor.json'}" in done.stderr
    assert not (tmp_path / "snapshot.pt").exists()  # the script's save went to the scratch
    assert not (CORPUS / "snapshot.pt").exists()


def test_a_script_without_a_process_group(tmp_path):
    """It ran, undistributed: under torchrun every process would train alone. A finding (exit
    1), not bad input."""
    (tmp_path / "single.py").write_text("import torch\nprint(torch.ones(2).sum().item())\n")
    done = doctor("single.py", cwd=tmp_path)
    assert done.returncode == 1
    said = " ".join(done.stdout.split())
    assert "error no-process-group: the script ran to its end without joining a process group" \
        in said


def test_the_doctors_option_after_the_script_is_the_scripts_and_the_doctor_says_so(tmp_path):
    """torchrun's order: an option after the script is the script's. A script that refuses it
    exits 2 by argparse, with no traceback: its own words are shown, and where they went."""
    (tmp_path / "args.py").write_text(
        "import argparse\nargparse.ArgumentParser().parse_args()\n")
    done = doctor("args.py", "--world-size", 4, "--json", cwd=tmp_path)
    assert done.returncode == 2
    assert "error: unrecognized arguments: --world-size 4 --json" in done.stdout
    assert "the script exited with status 2" in done.stdout
    assert ("--world-size 4 --json went to the script: the doctor's options come before the "
            "script (python -m ddplab doctor --world-size 4 --json args.py ...)") in \
        " ".join(done.stderr.split())  # wrapped at 100 columns


def test_a_reader_who_stops_reading_gets_no_traceback(tmp_path):
    """`python -m ddplab doctor train.py | head`: the pipe is closed before the report."""
    (tmp_path / "single.py").write_text("print('hello')\n")
    done = subprocess.Popen([sys.executable, "-m", "ddplab", "doctor", "single.py"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done.stdout.close()
    stderr = done.communicate(timeout=120)[1].decode()
    assert done.returncode == 1 and "Traceback" not in stderr, stderr


def test_under_torchrun(tmp_path):
    """Every process torchrun starts runs the script; rank 0 judges and writes the page."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = tmp_path / "report"
    done = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "-m", "ddplab",
                           "doctor", "--out", str(out), str(CORPUS / "tutorial_torchrun.py"),
                           "3", "1"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    data = json.loads((out / "doctor.json").read_text())
    assert {f["id"] for f in data["findings"] if f["kind"] == "error"} == {"sampler-set-epoch"}
    assert data["world_size"] == 2 and data["steps_run"] == 8
    assert done.returncode != 0  # rank 0's exit status 1, passed on by torchrun


def test_a_collective_mismatch_under_torchrun_is_named_with_both_lines(tmp_path):
    """Gloo ends rank 0's process (the judge) from its own thread when its evaluation's
    all-reduce meets rank 1's gradient all-reduce; rank 1 sees it gone, judges in its place,
    and reads rank 0's ledger from torchrun's store: both lines are named, as in the doctor's
    own runs."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out, name = tmp_path / "report", "plain_rank0_eval_allreduce.py"
    done = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "-m", "ddplab",
                           "doctor", "--out", str(out), str(CORPUS / name)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    data = json.loads((out / "doctor.json").read_text())
    found = [f for f in data["findings"] if f["kind"] == "error"]
    assert [f["id"] for f in found] == ["collective-on-some-ranks"], done.stdout
    calls = found[0]["evidence"]["calls"]
    source = (CORPUS / name).read_text().splitlines()
    assert calls["0"]["by"] is None and "dist.all_reduce(counts)" in source[
        calls["0"]["line"] - 1]
    assert calls["1"]["by"] == "DDP's all-reduce of the gradients"
    assert ".backward()" in source[calls["1"]["line"] - 1]
    assert data["crash"]["explained"]  # whichever rank gloo failed with an error
    assert "collective-on-some-ranks" in done.stdout and done.returncode != 0


def test_rank_0_gone_without_a_word_waits_for_the_others_report(tmp_path):
    """Rank 0's process ends at once (as gloo's own thread can end it); rank 1 fails 0.3 s
    later. The run waits the crash's grace for rank 1's report, so the crash shown is rank 1's
    own error, not only 'the process ended without a report'."""
    script = tmp_path / "gone.py"
    script.write_text(
        "import os, time\nimport torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 0:\n    os._exit(3)\n"
        "time.sleep(0.3)\nraise RuntimeError('rank 1 saw its peer go')\n")
    diagnosis = diagnose_module.diagnose(str(script), world_size=2, timeout=20, cwd=str(tmp_path))
    assert diagnosis.crash is not None
    assert diagnosis.crash.rank == 1 and "rank 1 saw its peer go" in diagnosis.crash.error


def test_the_example_run_where_it_lies_names_its_lines(tmp_path):
    """The doctor's example, run from the checkout (or where pip put it), is the reader's script
    although it lies inside ddplab: each finding names its line of train.py, not '?' (as the
    H200 run printed before ddplab's own folder stopped hiding it)."""
    import ddplab.doctor

    example = os.path.join(os.path.dirname(ddplab.doctor.__file__), "examples", "train.py")
    diagnosis = diagnose_module.diagnose(example, [], cwd=str(tmp_path))
    errors = [f for f in diagnosis.findings if f.kind == "error"]
    assert {f.id for f in errors} == {"sampler-set-epoch", "metric-mean-of-means",
                                      "every-rank-writes"}
    source = open(example).read().splitlines()
    for f in errors:
        assert f.file == os.path.realpath(example) and f.line, (f.id, f.file, f.line)
    where = {f.id: source[f.line - 1] for f in errors}
    assert "all_reduce" in where["metric-mean-of-means"]
