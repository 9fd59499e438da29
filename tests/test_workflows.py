"""The GitHub workflows, as far as anything here can check them (neither runs here; `make
check-workflows`, in .ci/run, validates both against GitHub's workflow schema): the book's is
built by the command .ci/run builds it with and published with GitHub's Pages actions; CI runs
the README's test command and the browser checks on .ci/run's Python; every action is pinned
to a full commit, its version beside it."""

from __future__ import annotations

import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
PINNED = re.compile(r"^\s*(?:-\s+)?uses:\s+([\w.-]+/[\w.-]+)@([0-9a-f]{40})\s+#\s+v\d+(\.\d+)*$")


def workflow(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def runs(job: dict) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def uses(job: dict) -> list[str]:
    return [step["uses"].split("@")[0] for step in job["steps"] if "uses" in step]


def test_every_action_is_pinned_to_a_commit_with_its_version():
    lines = [line for path in sorted(WORKFLOWS.glob("*.yml"))
             for line in path.read_text().splitlines() if re.match(r"^\s*(-\s+)?uses:", line)]
    assert lines and all(PINNED.match(line) for line in lines), \
        [line for line in lines if not PINNED.match(line)]


def test_the_book_is_built_as_ci_builds_it_and_deployed_to_pages():
    book = workflow("book.yml")
    assert book[True]["push"]["branches"] == ["main"]  # YAML 1.1 reads the key `on` as True
    assert book["permissions"]["pages"] == "write" and book["permissions"]["id-token"] == "write"
    build, deploy = book["jobs"]["build"], book["jobs"]["deploy"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert runs(build) == ["make book"] and "\nmake book\n" in ci
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"\nbook: .*\n\t.*jupyter-book build \. .*-W", makefile)
    assert "actions/upload-pages-artifact" in uses(build)
    assert next(s for s in build["steps"] if "upload-pages-artifact" in s.get("uses", ""))[
        "with"]["path"] == "_build/html"
    assert uses(deploy) == ["actions/deploy-pages"] and deploy["needs"] == "build"


def test_ci_runs_the_readmes_test_command_and_the_browser_checks_on_ci_s_python():
    ci = workflow("ci.yml")
    assert "pull_request" in ci[True]
    job = ci["jobs"]["test"]
    readme = (ROOT / "README.md").read_text()
    test_command = re.search(r"\n(make test)\s+#", readme).group(1)
    assert test_command in runs(job) and "make check-browser" in runs(job)
    assert runs(job).index("make book") < runs(job).index("make check-browser")
    # .ci/run's machine: Debian 12 and its Python 3.11 (scripts/setup.sh brings torch 2.13.0+cpu)
    assert job["container"].startswith("python:3.11") and job["container"].endswith("bookworm")
    assert workflow("book.yml")["jobs"]["build"]["container"] == job["container"]
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert 'torch==2.13.0+cpu' in setup and "make setup" in (ROOT / ".ci" / "run").read_text()


def test_ci_checks_the_workflows_offline():
    assert "\nmake check-workflows\n" in (ROOT / ".ci" / "run").read_text()
    target = (ROOT / "Makefile").read_text().split("\ncheck-workflows:", 1)[1].split("\n\n")[0]
    assert "--builtin-schema vendor.github-workflows .github/workflows/*.yml" in target
