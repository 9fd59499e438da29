"""Chapter 1, averaging (``book/averaging.md``): what DDP averages, over whom, and by how much."""
