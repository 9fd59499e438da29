"""The diagnosis as SARIF 2.1.0 (OASIS), the format GitHub code scanning and other CI tools
read: the doctor's checks are the tool's rules (each with its book section and its fix), every
finding a result at the script's line, the run's exit status in ``invocations`` with a
notification per check this run could not judge (and for a crash no check explains).
``tests/test_doctor_formats.py`` validates it against the standard's schema."""

from __future__ import annotations

from ddplab.common.home import book
from ddplab.doctor.judging.checks import CHECKS
from ddplab.doctor.judging.findings import paths_from_root, shown_path
from ddplab.doctor.reporting.text import failed

SCHEMA = ("https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/"
          "sarif-schema-2.1.0.json")
LEVELS = {"error": "error", "waste": "warning", "advisory": "note"}


def rule(check) -> dict:
    return {"id": check.id, "name": check.id, "shortDescription": {"text": check.checks},
            "helpUri": check.url, "help": {"text": check.fix},
            "defaultConfiguration": {"level": LEVELS[check.kind]}}


def result(finding, index: dict) -> dict:
    found = {"ruleId": finding.id, "ruleIndex": index[finding.id],
             "level": LEVELS[finding.kind],
             "message": {"text": f"{finding.message}. Fix:\n{finding.fix}\nBook: {finding.url}"}}
    if finding.file:
        region = {"startLine": finding.line} if finding.line else {}
        found["locations"] = [{"physicalLocation": {
            "artifactLocation": {"uri": shown_path(finding.file)}, **(
                {"region": region} if region else {})}}]
    return found


@paths_from_root
def report(diagnosis) -> dict:
    index = {check.id: i for i, check in enumerate(CHECKS)}
    crash = diagnosis.unexplained_crash()
    notes = []
    if crash is not None:
        notes.append({"level": "error", "descriptor": {"id": "script-failed"},
                      "message": {"text": f"the script {failed(crash)}: {crash.error}"}})
    notes += [{"level": "warning", "descriptor": {"id": "not-judged"},
               "associatedRule": {"id": v.id, "index": index[v.id]},
               "message": {"text": f"{v.id} not judged on this run: {v.why}"}}
              for v in diagnosis.not_judged()]
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [{
        "tool": {"driver": {"name": "ddplab doctor", "informationUri": book(),
                            "rules": [rule(check) for check in CHECKS]}},
        "results": [result(f, index) for f in diagnosis.findings],
        "invocations": [{"executionSuccessful": diagnosis.exit_code() != 2,
                         "exitCode": diagnosis.exit_code(),
                         "toolExecutionNotifications": notes}],
    }]}
