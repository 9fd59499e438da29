"""Imported once by the forkserver that forks every rank process (and by nothing else).

Everything a rank needs is imported here, once, instead of in each of up to 64 ranks: dynamo
too, since ``DistributedDataParallel.__init__`` reads
``torch._dynamo.utils.get_optimize_ddp_mode()``, which imports dynamo and sympy lazily, a
second of CPU per rank. The
cyclic garbage collector is off during the imports (it would run hundreds of times over
torch's objects for nothing: 2.4 s instead of 2.9 s here) and ``gc.freeze()`` afterwards keeps
those objects out of every forked rank's collections and copy-on-write pages (the advice of
the ``gc.freeze`` documentation for processes that fork without exec).
"""

import gc

gc.disable()
try:
    import ddplab.chapters

    ddplab.chapters.experiment_modules()  # every chapter's rank functions, found, not listed
    import ddplab.engine.rank  # noqa: F401  (torch, torch.distributed, DDP, dynamo)
finally:
    gc.freeze()
    gc.enable()
