"""ddplab: real DistributedDataParallel experiments, warm from a notebook or under torchrun.

    import ddplab
    results = ddplab.run(fn, world_size=4, **params)
    with ddplab.Cluster(world_size=4) as cluster:
        results = cluster.run(fn, **params)
    with ddplab.placed(backend="gloo", device="cuda"):   # where every run goes (the process's)
        results = ddplab.run(fn, world_size=4, **params)
    ddplab.placement()                                    # Placement('gloo', 'cuda') inside

Importing it starts nothing: the forkserver that forks the ranks starts with the first
``placed()`` (a notebook's first cell) or the first run.
"""

from ddplab.engine.cluster import MAX_WORLD_SIZE, Cluster, RankError, logs, run
from ddplab.engine.placement import placed, placement

__all__ = ["Cluster", "MAX_WORLD_SIZE", "RankError", "logs", "placed", "placement", "run"]
__version__ = "0.1.0"
