"""``known-crash``: a crash no check explains, looked up in the book's error index
(``judging/error_index.py``): named with its entry, its cause and what to change, at the
script's line that raised it."""

from __future__ import annotations

from ddplab.doctor.judging import error_index
from ddplab.doctor.judging.check import ANY_CRASH, Check
from ddplab.doctor.judging.judgement import Problem, found, not_applicable, passed


def known_crash(evidence, earlier):
    crash = evidence.crashed()
    if crash is None:
        return not_applicable("the script did not crash")
    explained = [f.id for f in earlier.explaining()]
    if explained:
        return passed(f"the crash is explained above ({', '.join(explained)})")
    entry = error_index.match(crash)
    if entry is None:
        return not_applicable("the crash matches no entry of the book's error index")
    return found(Problem(
        f"the script crashed ({crash.error[:160]}): {entry.cause}",
        {"entry": entry.label, "error": crash.error, "rank": crash.rank},
        crash.script_file, crash.script_line, fix=entry.fix, section=entry.label))


FIX_KNOWN = """\
# each entry of the book's error index says what to change, as code"""


KNOWN_CRASH = Check(
    "known-crash", "error",
    "a crash no check above explains, looked up in the book's error index",
    "errors",
    FIX_KNOWN, known_crash, reads_explanations=True, explains=ANY_CRASH)
