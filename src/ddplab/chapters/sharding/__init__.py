"""Chapter 2, sharding (``book/sharding.md``): DistributedSampler, global batch, evaluation."""
