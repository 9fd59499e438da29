"""Chapter 5, the time cost (``book/time_cost.md``): step phases, all-reduce, the cost model."""
