"""``report.html``: one self-contained file (figures as PNG data URIs, CSS inline, no script,
nothing fetched), readable offline and attachable to an issue. A section for each top-level
stage of ``stages.STAGES``, with its table, its figures and those of the stages whose parts lie
inside its part (the chapters' own plots), and a link to the book's section on it, in the
rendered book (``ddplab.common.home``: the repository's Pages site, or ``DDPLAB_BOOK_URL``)."""

from __future__ import annotations

import base64
import html
import io
import json

import matplotlib

matplotlib.use("Agg")  # a file, never a window: the report may run on a headless node

import matplotlib.pyplot as plt  # noqa: E402

from ddplab.common.home import book  # noqa: E402
from ddplab.common.html_page import head, table  # noqa: E402
from ddplab.report import stages  # noqa: E402
from ddplab.report.figures import shown  # noqa: E402
from ddplab.report.summary import rows, verdicts  # noqa: E402


def png(fig) -> str:
    """A figure as an <img> with a data URI (nothing to fetch)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode()
    return f'<img alt="figure" src="data:image/png;base64,{data}">'


def figures(sections: dict) -> dict:
    """top-level key -> [<img>...]: the figures of each stage that ran, in its top-level
    stage's section."""
    out = {}
    for stage in stages.STAGES:
        if stage.name in sections:
            out.setdefault(stage.key.split(".")[0], []).extend(
                png(fig) for fig in stage.figures(sections[stage.name]))
    return out


def compared_table(data: dict) -> str:
    body = [(label, shown(f["measured"], f["unit"]), shown(f["predicted"], f["unit"]),
             "-" if f["ratio"] is None else f"{f['ratio']:.2f}") for label, f in rows(data)]
    return table(("", "measured", "model", "measured / model"), body)


def book_link(page: str) -> str:
    """A stage's ``page.md#anchor`` in the rendered book: the page's .html, the heading's id
    (docutils makes a heading's id from its words as GitHub does, lower case, hyphens)."""
    name, _, anchor = page.partition("#")
    return f"{book()}{name.removesuffix('.md')}.html" + (f"#{anchor}" if anchor else "")


def stage_section(stage, part: dict | None, images: list[str]) -> list[str]:
    """One top-level stage's section: heading, what it shows, its table, figures, numbers."""
    out = [f"<h2 id='{stage.key}'>{html.escape(stage.title)}</h2><p>{html.escape(stage.about)} "
           f"<a href='{html.escape(book_link(stage.book))}'>In the book.</a></p>"]
    if part is None:
        return out + ["<p class='missing'>Not measured.</p>"]
    shown_table = stage.table(part) if stage.table else None
    if shown_table is not None:
        if shown_table.note:
            out.append(f"<p class='prediction'>{html.escape(shown_table.note)}</p>")
        out.append(table(shown_table.head, shown_table.body))
    return out + images + [
        f"<details><summary>{html.escape(stage.title)}: every number</summary><pre>"
        f"{html.escape(json.dumps(part, indent=1))}</pre></details>"]


def render(report) -> str:
    data = report.to_json()
    images = figures(report.sections)
    parts = [head("ddplab report"), "<h1>ddplab report</h1>",
             "<p>Every figure measured on this cluster, beside what the book's cost model "
             "predicts for it from the same measurements; a ratio far from 1 is a question "
             "worth asking.</p>"]
    if data["failure"]:
        parts.append(f"<p class='failure'>{html.escape(data['failure'])}</p>")
    if data["missing"]:
        items = "".join(f"<li>{html.escape(m['part'])}: {html.escape(m['why'])}</li>"
                        for m in data["missing"])
        parts.append(f"<div class='missing'>Not measured:<ul>{items}</ul></div>")
    parts += ["<h2>Summary</h2>", compared_table(data),
              f"<pre>{html.escape(chr(10).join(verdicts(data)))}</pre>"]
    for stage in stages.STAGES:
        if stage.parent is None:
            parts += stage_section(stage, data.get(stage.key), images.get(stage.key, []))
    parts.append("</body></html>")
    return "\n".join(parts)
