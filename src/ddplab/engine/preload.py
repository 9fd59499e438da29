"""Imported once by the forkserver that forks every rank process (and by nothing else).

Everything a rank needs is imported here, once, instead of in each of up to 64 ranks: dynamo
too, since ``DistributedDataParallel.__init__`` reads
``torch._dynamo.utils.get_optimize_ddp_mode()``, which imports dynamo and sympy lazily, a
second of CPU per rank. ``warm.frozen_imports`` keeps the collector out of it.
"""

from ddplab.engine.warm import frozen_imports

with frozen_imports():
    import ddplab.chapters

    ddplab.chapters.experiment_modules()  # every chapter's rank functions, found, not listed
    import ddplab.engine.rank  # noqa: F401  (torch, torch.distributed, DDP, dynamo)
