"""The diagnosis as GitHub Actions workflow commands: one annotation per finding at the
script's line (``::error file=train.py,line=88,title=sampler-set-epoch::...``), shown on the
pull request's diff, then the summary line. Errors are ``error``, waste ``warning``,
advisories ``notice``; a check this run could not judge is a warning at the script, and a
crash no check explains an error there."""

from __future__ import annotations

from ddplab.doctor.judging.findings import paths_from_root, shown_path
from ddplab.doctor.reporting.text import failed, summary

LEVELS = {"error": "error", "waste": "warning", "advisory": "notice"}


def _data(text: str) -> str:
    """A message as a workflow command carries it: %, CR and LF escaped."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, message: str, file: str | None, line: int | None,
               title: str) -> str:
    where = [f"file={_property(shown_path(file))}"] if file else []
    where += [f"line={line}"] if file and line else []
    where.append(f"title={_property(title)}")
    return f"::{level} {','.join(where)}::{_data(message)}"


@paths_from_root
def report(diagnosis) -> str:
    lines = [annotation(LEVELS[f.kind], f"{f.message}\n\nfix:\n{f.fix}\n\nbook: {f.url}",
                        f.file, f.line, f"ddplab doctor {f.id}") for f in diagnosis.findings]
    lines += [annotation("warning", f"not judged on this run: {v.why}", diagnosis.script, None,
                         f"ddplab doctor {v.id}: not judged") for v in diagnosis.not_judged()]
    crash = diagnosis.unexplained_crash()
    if crash is not None:
        lines.append(annotation("error", f"the script {failed(crash)}:\n"
                                f"{crash.traceback or crash.error}",
                                diagnosis.script, None, "ddplab doctor: the script failed"))
    lines.append(summary(diagnosis))
    return "\n".join(lines)
