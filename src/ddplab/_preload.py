"""Imported once by the forkserver that forks every rank process (and by nothing else).

Everything a rank needs is imported here, once, instead of in each of up to 64 ranks. The
cyclic garbage collector is off during the imports (it would run hundreds of times over
torch's objects for nothing: 2.4 s instead of 2.9 s here) and ``gc.freeze()`` afterwards keeps
those objects out of every forked rank's collections and copy-on-write pages (the advice of
the ``gc.freeze`` documentation for processes that fork without exec).
"""

import gc

gc.disable()
try:
    import ddplab.experiments.accumulation  # noqa: F401
    import ddplab.experiments.allreduce  # noqa: F401
    import ddplab.experiments.averaging  # noqa: F401
    import ddplab.experiments.batchnorm  # noqa: F401
    import ddplab.experiments.bucket_options  # noqa: F401
    import ddplab.experiments.bucket_rule  # noqa: F401
    import ddplab.experiments.buckets  # noqa: F401
    import ddplab.experiments.check  # noqa: F401
    import ddplab.experiments.checkpoints  # noqa: F401
    import ddplab.experiments.compression  # noqa: F401
    import ddplab.experiments.critical_batch  # noqa: F401
    import ddplab.experiments.logged_loss  # noqa: F401
    import ddplab.experiments.lr_scaling  # noqa: F401
    import ddplab.experiments.lr_sweeps  # noqa: F401
    import ddplab.experiments.noise_scale  # noqa: F401
    import ddplab.experiments.overlap  # noqa: F401
    import ddplab.experiments.rank0_collective  # noqa: F401
    import ddplab.experiments.sharding  # noqa: F401
    import ddplab.experiments.start_state  # noqa: F401
    import ddplab.experiments.step_time  # noqa: F401
    import ddplab.experiments.uneven  # noqa: F401
    import ddplab.experiments.unused_parameters  # noqa: F401
    import ddplab.experiments.validation  # noqa: F401
    import ddplab.rank  # noqa: F401  (torch, torch.distributed, DDP, dynamo)
finally:
    gc.freeze()
    gc.enable()
