"""``known-crash``: a crash no check explains, looked up in the book's error index
(``judging/error_index.py``): named with its entry, its cause and what to change, at the
script's line that raised it."""

from __future__ import annotations

import re
import sysconfig

from ddplab.doctor.judging import error_index
from ddplab.doctor.judging.judgement import Problem, found, not_applicable, passed

FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_LIBRARY = (sysconfig.get_paths()["stdlib"], "site-packages", "dist-packages", "<frozen")


def script_line(traceback: str) -> tuple:
    """(file, line) of the innermost frame of the traceback outside Python and its packages."""
    frames = [(path, int(line)) for path, line in FRAME.findall(traceback or "")
              if not any(part in path for part in _LIBRARY)]
    return frames[-1] if frames else (None, None)


def known_crash(evidence, earlier):
    crash = evidence.crashed()
    if crash is None:
        return not_applicable("the script did not crash")
    explained = [f.id for f in earlier if f.explains]
    if explained:
        return passed(f"the crash is explained above ({', '.join(explained)})")
    entry = error_index.match(crash)
    if entry is None:
        return not_applicable("the crash matches no entry of the book's error index")
    error = (crash.get("error") or "").strip()
    return found(Problem(
        f"the script crashed ({error[:160]}): {entry.cause}",
        {"entry": entry.label, "error": error, "rank": crash.get("rank")},
        *script_line(crash.get("traceback")), fix=entry.fix, section=entry.label))
