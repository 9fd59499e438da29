"""A self-contained HTML page (CSS inline, no script, nothing fetched), readable offline and
attachable to an issue: what ``ddplab report`` and ``ddplab doctor --out`` write."""

from __future__ import annotations

import html

CSS = """body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;
text-align:right}td:first-child,th:first-child{text-align:left}img{max-width:100%}
.missing{background:#fff3cd;padding:0.5em}.failure{background:#f8d7da;padding:0.5em}
.prediction{background:#e8f0fe;padding:0.5em}pre{white-space:pre-wrap}"""


def table(head, body) -> str:
    cells = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
    lines = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                    for row in body)
    return f"<table><tr>{cells}</tr>{lines}</table>"


def head(title: str, css: str = "") -> str:
    """The page up to its body's first element."""
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>{CSS}{css}</style></head><body>")
