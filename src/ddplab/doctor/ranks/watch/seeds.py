"""Seeds: every ``torch.manual_seed`` the reader's code calls (wrapped: torch has no hook).

Batches drawn at random (``torch.randint`` offsets, as nanoGPT draws them) are the same on
every rank after the same seed; ``same-batches`` names the seed's line when it finds them.
"""

from __future__ import annotations

import ddplab.doctor.records as records
from ddplab.doctor.ranks import patching, where
from ddplab.doctor.ranks import recorder as _recorder


def install() -> None:
    import torch

    def make_manual_seed(real):
        def manual_seed(seed):
            spot = where.line()
            if spot is not None:
                try:
                    value = int(seed)
                except (TypeError, ValueError):
                    value = None
                if value is not None:
                    _recorder.RECORDER.add(records.Seed(seed=value, file=spot[0], line=spot[1]))
            return real(seed)
        return manual_seed

    patching.wrap(torch, "manual_seed", make_manual_seed)
