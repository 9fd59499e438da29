"""The doctor's registry of checks: one record per check, every id the issue asks for, each
pointing at a section of the book that exists, with a fix that is Python; the report's text,
every check found, fits the book's column."""

from __future__ import annotations

import pathlib
import re

from ddplab.common import home
from ddplab.doctor.judging import error_index
from ddplab.doctor.judging.check import PAGES, page_of
from ddplab.doctor.judging.checks import CHECKS
from ddplab.doctor.judging.findings import KINDS, Diagnosis, Finding, Verdict
from ddplab.doctor.judging.judges import collectives, data, files, metric, shards
from ddplab.doctor.judging.judges import model as judge_model
from ddplab.doctor.reporting import text

BOOK = pathlib.Path(__file__).parent.parent / "book"
ASKED = {"sampler-set-epoch", "no-distributed-sampler", "collective-on-some-ranks",
         "cpu-tensor-nccl", "clip-before-unscale", "metric-mean-of-means",
         "accumulation-no-sync", "accumulation-unsynced-step", "accumulation-loss-not-divided",
         "replicas-diverge", "every-rank-writes", "find-unused-parameters", "uneven-inputs",
         "lr-not-scaled", "overlapping-shards", "same-batches", "gradients-reduced-twice",
         "different-datasets", "barrier-every-step", "logged-sum-not-divided"}


def labels() -> dict:
    """label -> (page, the line right after ``(label)=``) over the book's pages."""
    found = {}
    for page in BOOK.glob("*.md"):
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines[:-1]):
            match = re.fullmatch(r"\((.+)\)=", line)
            if match:
                found[match.group(1)] = (page.stem, lines[i + 1])
    return found


def test_one_record_per_check_and_every_asked_id():
    ids = [c.id for c in CHECKS]
    assert len(ids) == len(set(ids))
    assert ASKED <= set(ids)
    assert all(c.kind in KINDS for c in CHECKS)
    assert {c.id: c.kind for c in CHECKS}["accumulation-no-sync"] == "waste"
    assert {c.id: c.kind for c in CHECKS}["lr-not-scaled"] == "advisory"


def test_each_check_links_a_section_of_the_rendered_book():
    """Each check's link is the rendered page of the label's section, at the label (Sphinx
    gives it an id; the browser check opens each in the built book); every label the doctor
    names stands before a heading of that page."""
    found = labels()
    entries = {entry.label for entry in error_index.ENTRIES}  # known-crash's own sections
    assert all((BOOK / f"{page}.md").is_file() for page in PAGES)
    for label in entries:
        assert found[label][0] == page_of(label) == "errors"
    for check in CHECKS:
        page, after = found[check.section]
        assert page_of(check.section) == page and after.startswith("#"), check.id
        assert check.url == f"{home.book()}{page}.html#{check.section}"
    # the book is the GitHub Pages site of the repository pyproject.toml names
    assert home.book() == f"https://{'.github.io/'.join(home.owner_and_name())}/book/"


def test_each_fix_is_python():
    for check in CHECKS:
        compile(check.fix, check.id, "exec", dont_inherit=True)


JUDGES_WITH_FIXES = (judge_model, collectives, data, files, metric, shards)  # fixes of their own


def test_the_report_fits_the_books_column():
    """Every check found once, with a long message, on a long path, with each fix the doctor
    gives (the judges' own too): no line of the report wider than the page's 100 columns."""
    fixes = [c.fix for c in CHECKS] + [getattr(judge, n) for judge in JUDGES_WITH_FIXES
                                       for n in dir(judge) if n.startswith("FIX_")] + [
        entry.fix for entry in error_index.ENTRIES]
    assert all(len(line) <= text.FIX_WIDTH for fix in fixes for line in fix.splitlines())
    message = ("the DistributedSampler of the DataLoader made at train.py:21 gave the same order "
               "in two epochs (epoch=0 both times; first indices 44, 17, 47, 35, 33, 63, ... in "
               "both): set_epoch is never called, so every epoch repeats one shuffle")
    verdicts = [Verdict(c.id, c.kind, "found", c.checks, [Finding(
        c.id, c.kind, message, {}, "/tmp/a_training_script_of_some_length.py", 1234,
        c.section, c.url, fix)]) for c, fix in zip(CHECKS * 2, fixes)]
    diagnosis = Diagnosis("/tmp/a_training_script_of_some_length.py", 128, "nccl", "gloo",
                          10_000, "stopped", verdicts, root="/tmp")
    report = text.report(diagnosis)
    assert all(check.url in report for check in CHECKS)  # whole addresses
    assert max(len(line) for line in report.splitlines()) <= 100, report
    passed = [Verdict(c.id, c.kind, "passed", message) for c in CHECKS]
    report = text.report(Diagnosis("/tmp/train_fixed.py", 2, "gloo", "gloo", 8, "stopped",
                                   passed, root="/tmp"))
    assert max(len(line) for line in report.splitlines()) <= 100, report


def test_the_doctor_is_self_contained():
    """It runs the reader's script on processes of its own: no chapter, no report, no pool,
    and of the engine only what under-torchrun means and the process toolkit it shares with
    the engine (``lifeline``: dying with the parent; ``loopback``: the store on 127.0.0.1 only;
    ``rank_logs``: a rank's output sent to its log), and where the book lives (``home``)."""
    import ast

    allowed = {"ddplab.common.checks", "ddplab.common.home", "ddplab.common.html_page",
               "ddplab.engine.torchrun",
               "ddplab.engine", "ddplab.engine.lifeline", "ddplab.engine.loopback",
               "ddplab.engine.rank_logs", "ddplab.engine.warm"}
    doctor = pathlib.Path(__file__).parent.parent / "src" / "ddplab" / "doctor"
    found = set()
    for path in doctor.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
    outside = {m for m in found if m.startswith("ddplab.") and not m.startswith("ddplab.doctor")}
    assert outside and outside <= allowed | {f"{m}.{n}" for m in allowed for n in (
        "int_in_range", "positive_int", "positive_number", "head", "table", "under_torchrun",
        "exit_with_parent", "loopback_store", "rank_logs", "frozen_imports", "book")}
