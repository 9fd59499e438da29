"""ddplab: real DistributedDataParallel experiments, warm from a notebook or under torchrun.

    import ddplab
    results = ddplab.run(fn, world_size=4, **params)
    with ddplab.Cluster(world_size=4, backend="auto") as cluster:
        results = cluster.run(fn, **params)
"""

from ddplab.engine.cluster import MAX_WORLD_SIZE, Cluster, RankError, logs, placement, prestart, run

prestart()  # the forkserver imports torch while the caller does; see engine.forkserver.prestart

__all__ = ["Cluster", "MAX_WORLD_SIZE", "RankError", "logs", "placement", "run"]
__version__ = "0.1.0"
