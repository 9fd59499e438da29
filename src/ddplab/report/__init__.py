"""``ddplab report``: the book's measurements and cost model, run on the reader's own cluster.

    python -m ddplab report --world-size 2 [--out DIR] [--quick] [--json]
    torchrun --nnodes N --nproc-per-node G [rendezvous args] -m ddplab report [--out DIR]

The report sits above the chapters, as the CLI does: its stages (``stages.STAGES``, one record
each, ``stage.Stage``) call the time-cost chapter's and the memory chapter's public drivers
(which run under the local pool and under torchrun alike) and set the chapter's model beside
every measurement. Rank 0 writes ``DIR/report.json`` and the self-contained
``DIR/report.html``. Nothing below ``ddplab.report`` imports it.
"""

from ddplab.report.build import Report, run

__all__ = ["Report", "run"]
