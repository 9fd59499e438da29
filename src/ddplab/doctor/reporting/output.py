"""The diagnosis written where the reader asked: the report on standard output in the format
asked for (``text``, ``json``, ``github`` workflow annotations, ``sarif``), and with
``--out DIR`` the page and its JSON beside it."""

from __future__ import annotations

import json
import sys

from ddplab.doctor.reporting import github, page, sarif, text

FORMATS = ("text", "json", "github", "sarif")


def rendered(diagnosis, format: str) -> str:
    if format == "json":
        return json.dumps(diagnosis.to_json(), indent=1)
    if format == "sarif":
        return json.dumps(sarif.report(diagnosis), indent=1)
    if format == "github":
        return github.report(diagnosis)
    return text.report(diagnosis)


def show(diagnosis, args) -> None:
    print(rendered(diagnosis, args.format))
    if args.out:
        paths = page.write(diagnosis, args.out)
        print(f"written: {paths['html']} and {paths['json']}",
              file=sys.stdout if args.format == "text" else sys.stderr)
