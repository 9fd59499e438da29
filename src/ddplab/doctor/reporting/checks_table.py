"""The book's table of the doctor's checks, made from the registry (``checks.CHECKS``): the
page runs ``markdown()`` in a cell whose output is read as MyST, so a check added to the
registry is on the page, with its kind and its section, without an edit there."""

from __future__ import annotations

from ddplab.doctor.judging.checks import CHECKS


def markdown(checks=CHECKS) -> str:
    rows = ["| check | kind | what it checks | where the book shows it |", "|---|---|---|---|"]
    rows += [f"| `{c.id}` | {c.kinds} | {c.checks} | {{ref}}`{c.section}` |" for c in checks]
    return "\n".join(rows)
