"""``ddplab doctor``: run the reader's own training script on instrumented ranks and name the
DDP mistakes it makes, with the evidence, the line and the fix.

    python -m ddplab doctor train.py [args]          # 2 ranks on this machine
    torchrun --nproc-per-node 4 -m ddplab doctor train.py [args]

    from ddplab.doctor.diagnose import diagnose
    diagnosis = diagnose("train.py", ["--epochs", "2"], world_size=2)

Each rank runs the script unchanged as ``__main__`` with torchrun's environment
(``runpy.run_path``). torch's public hooks watch the optimizer steps and the forwards
(``register_optimizer_step_pre_hook``/``_post_hook``, ``register_module_forward_pre_hook``),
an audit hook the files opened for writing; functions are wrapped only where no hook exists
(collectives, DataLoader and DistributedSampler iteration, DDP's constructor, backward,
GradScaler, clipping). Evidence travels over the doctor's own store, never over the script's
process groups. Every rank stops at the same optimizer step (``--steps``) or after two
epochs. The checks are records in ``checks.CHECKS``.

The package, one concept per file: ``diagnose`` (run, then judge), ``launcher`` (start,
watch, roll call, clean up), ``processes`` and ``zygote`` (ranks forked from one process that
imported torch once), ``rank`` (one rank's process), ``children`` (ranks the script spawns
itself), ``instrument`` (every watcher, and the script run as ``__main__``), ``store``,
``recorder`` (one process's evidence and watchdog), ``where`` (the reader's line),
``watch_*`` (the hooks, one family each), ``evidence`` and ``judge_*`` (the checks' reading
of the run), ``judgement``, ``checks`` (the registry), ``findings`` (finding, verdict,
diagnosis), ``text`` and ``page`` (output), ``command`` (the CLI), ``torchrun`` (the same
under torchrun), ``inputs`` (bad input).
"""
