"""``doctor.html``: the diagnosis as one self-contained page (no script, nothing fetched),
beside ``doctor.json``; the page and the report share their look (``common.html_page``)."""

from __future__ import annotations

import html
import json
import os

from ddplab.common.html_page import head, table
from ddplab.doctor.judging.findings import paths_from_root, place, shown_path
from ddplab.doctor.reporting.text import failed, summary

CSS = ".error{border-left:4px solid #c0392b}.waste{border-left:4px solid #e67e22}" \
      ".advisory{border-left:4px solid #2e86c1}.finding{padding:0.2em 0.8em;margin:1em 0}"


def finding_html(f) -> str:
    return (f"<div class='finding {f.kind}'><p><code>{html.escape(place(f.file, f.line))}"
            f"</code> <b>{f.kind} {html.escape(f.id)}</b>: {html.escape(f.message)}</p>"
            f"<p>The change:</p><pre>{html.escape(f.fix)}</pre>"
            f"<p><a href='{html.escape(f.url)}'>In the book.</a></p>"
            f"<details><summary>evidence</summary><pre>"
            f"{html.escape(json.dumps(f.evidence, indent=1, default=str))}</pre></details></div>")


@paths_from_root
def render(diagnosis) -> str:
    script = shown_path(diagnosis.script)
    parts = [head(f"ddplab doctor: {script}", CSS),
             f"<h1>ddplab doctor: {html.escape(script)}</h1>",
             f"<p>{html.escape(summary(diagnosis))}</p>"]
    crash = diagnosis.unexplained_crash()
    if crash is not None:
        parts.append(f"<div class='failure'><p>The script {html.escape(failed(crash))}:</p><pre>"
                     f"{html.escape(crash.traceback)}</pre></div>")
    parts.append("<h2>Findings</h2>")
    parts += [finding_html(f) for f in diagnosis.findings] or ["<p>No findings.</p>"]
    parts.append("<h2>What was checked</h2>")
    parts.append(table(("check", "kind", "status", "why"),
                       [(v.id, v.kind, v.status, v.why) for v in diagnosis.checks]))
    for name, text in sorted(diagnosis.output.items()):
        parts.append(f"<details><summary>{html.escape(name)}'s output (the end)</summary><pre>"
                     f"{html.escape(text)}</pre></details>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write(diagnosis, folder: str) -> dict:
    os.makedirs(folder, exist_ok=True)
    paths = {"html": os.path.join(folder, "doctor.html"),
             "json": os.path.join(folder, "doctor.json")}
    with open(paths["html"], "w", encoding="utf-8") as f:
        f.write(render(diagnosis))
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump(diagnosis.to_json(), f, indent=1)
    return paths
