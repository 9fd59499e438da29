"""The diagnosis written where the reader asked: the report as text or JSON on standard output,
and with ``--out DIR`` the page and its JSON beside it."""

from __future__ import annotations

import json
import sys

from ddplab.doctor.reporting import page, text


def show(diagnosis, args) -> None:
    data = diagnosis.to_json()
    print(json.dumps(data, indent=1) if args.json else text.report(diagnosis))
    if args.out:
        paths = page.write(diagnosis, args.out)
        print(f"written: {paths['html']} and {paths['json']}",
              file=sys.stderr if args.json else sys.stdout)
