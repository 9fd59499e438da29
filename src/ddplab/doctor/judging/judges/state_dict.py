"""``state-dict-prefix``: a checkpoint saved with DDP's ``module.`` names.

``DistributedDataParallel`` holds the model as ``self.module``, so its ``state_dict()`` names
every entry ``module.<name>``. Loading that into the model without the wrapper (evaluation,
inference, a run on one GPU) raises "Missing key(s) in state_dict ... Unexpected key(s) in
state_dict: "module. ...". Loaded back into a DDP model it works (the PyTorch DDP tutorial's
checkpoint does that), so the doctor says so only as advice, and not at all when this run
loads a state into a DDP model or crashed on the prefix (``known-crash`` names that).
"""

from __future__ import annotations

import ddplab.doctor.records as records
from ddplab.doctor.judging import error_index
from ddplab.doctor.judging.check import Check
from ddplab.doctor.judging.findings import place, shown_path
from ddplab.doctor.judging.judgement import Problem, file_line, found, not_applicable, passed


def state_dict_prefix(evidence, earlier):
    saves = [w for w in evidence.all(records.Write) if w.record.prefixed]
    if not saves:
        return not_applicable("no torch.save of a state dict named with DDP's 'module.'")
    if any(f.section == error_index.PREFIX_LABEL for f in earlier.found("known-crash")):
        return passed("the crash above is this prefix (known-crash)")
    into_ddp = [r.record for r in evidence.all(records.LoadStateDict)
                if r.record.module == "DistributedDataParallel"]
    if into_ddp:
        return passed(f"the 'module.' state is loaded into a DDP model (at "
                      f"{place(*file_line(into_ddp[0]))})")
    first = saves[0].record
    return found(Problem(
        f"torch.save at {place(*file_line(first))} saves a state dict whose {first.prefixed} "
        f"keys all start with 'module.' ({first.first_key!r}, ...) into "
        f"{shown_path(first.path)}: DDP's names for the model it wraps. Loaded into the model "
        "without DDP (evaluation, inference, one GPU) it fails with \"Unexpected key(s) in "
        "state_dict: \"module. ...\"; this run never loads it, so this is advice",
        {"path": first.path, "keys": first.prefixed, "first_key": first.first_key,
         "ranks": sorted({w.rank for w in saves})},
        *file_line(first)))


STATE_DICT_PREFIX = Check(
    "state-dict-prefix", "advisory",
    "a saved state dict has the model's own names, not DDP's 'module.' ones",
    error_index.PREFIX_LABEL, error_index.FIX_PREFIX, state_dict_prefix, defers_to=('known-crash',))
