"""What two or more chapters use (the small MLP, DDP hooks, the clock and the timed step, input
checks, results, progress, GPU records). The ground floor: it imports nothing of ddplab
(ARCHITECTURE.md, "Floors"; ``tests/test_floors.py``)."""
