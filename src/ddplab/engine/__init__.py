"""The engine: warm pools of real process groups, torchrun, and what travels between them.

It imports no chapter and draws nothing; ``ddplab.run`` and ``ddplab.Cluster`` are its API.
"""
