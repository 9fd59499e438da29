"""Chapter 3, the learning rate (``book/lr_scaling.md``): scaling rules, noise scale, sweeps."""
