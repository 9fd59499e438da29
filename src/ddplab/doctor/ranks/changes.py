"""What the doctor had changed of the script's run when it crashed: the epochs cut to one batch
after training ended, CUDA and collectives mapped onto the CPU, the writes sent to the scratch
folder. A crash after any of them may be the doctor's doing, and the report says so rather
than that the script failed on its own (the crash's ``changes``, a list of short texts)."""

from __future__ import annotations

import ddplab.doctor.records as records
from ddplab.doctor.ranks import recorder as _recorder
from ddplab.doctor.ranks import scratch


def in_effect() -> list[str]:
    rec = _recorder.RECORDER
    found = []
    if rec.draining is not None:
        found.append(f"training ended after {rec.draining}: each epoch since has one batch")
    mapped = [m.what for m in rec.records.get(records.Mapped.KIND, [])]
    if mapped:
        found.append("mapped onto the CPU: " + ", ".join(mapped))
    writes = {w.path for w in rec.records.get(records.Write.KIND, [])}
    if writes and scratch.root() is not None:
        found.append(f"{len(writes)} path(s) written went to the scratch folder")
    return found
