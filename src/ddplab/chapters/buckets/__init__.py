"""Chapter 4, buckets (``book/buckets.md``): how DDP groups gradients and overlaps backward."""
