"""``ddplab doctor``: run the reader's own training script on instrumented ranks and name the
DDP mistakes it makes, with the evidence, the line and the fix.

    python -m ddplab doctor train.py [args]          # 2 ranks on this machine
    torchrun --nproc-per-node 4 -m ddplab doctor train.py [args]

    from ddplab.doctor.launch.diagnose import diagnose
    diagnosis = diagnose("train.py", ["--epochs", "2"], world_size=2)

The folders are the processes the code runs in, and the order evidence flows through them:

- ``launch/``: the doctor's own process. The command line, ``diagnose`` (run, then judge),
  the launcher (start the ranks, watch them, roll call on a hang, clean up), the zygote that
  forks the ranks with torch imported once, torchrun mode, bad input.
- ``ranks/``: every rank. The rank's entry point, the watchers (``ranks/watch/``: torch's
  hooks where they exist, wrappers where they do not), the script's CUDA mapped onto the CPU
  where there is no GPU per rank (``ranks/cuda_on_cpu/``), the recorder that keeps what one
  process saw, the reader's line (``where``), processes the script spawns itself.
- ``records``: one frozen type per kind of record a watcher writes and a judge reads (a
  DDP made, a loader pass, a collective, a step, ...), and their trip through JSON.
- ``store``: the doctor's own TCPStore, the only way evidence leaves a rank (never the
  script's process groups: an extra collective there shifts their sequence numbers).
- ``judging/``: the evidence read back, the checks' registry (``checks.CHECKS``), one judge
  per family (``judging/judges/``), findings and verdicts.
- ``reporting/``: the diagnosis as text, JSON and a page.

Rank-side code never imports judging or reporting; ``tests/test_floors.py`` holds the
floors.
"""
