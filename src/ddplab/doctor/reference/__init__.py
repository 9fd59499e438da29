"""The reference run: the reader's script once more as one process, on the samples the N ranks
used, compared step by step with them.

A correct DDP step equals one process stepping on the union of the ranks' batches, with
BatchNorm statistics per rank's chunk (DDP's own semantics). The N-rank run records each
rank's training batches, the starting state and the state after each optimizer step
(``ranks/watch/batches.py``); the reference run replays the batches and runs the forward in
the ranks' chunks (``ranks/watch/replay.py``); the doctor compares parameters, learning rates
and printed numbers (``compare.py``, ``printed.py``) and its judge names the first difference
(``judging/judges/reference.py``).

``layout`` names the files both sides share; ``collate`` cuts and joins batches as a
DataLoader yields them; ``plan`` is what the doctor tells the reference run before it starts.
"""
