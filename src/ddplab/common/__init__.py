"""What several chapters use (the small MLP, DDP hooks, the clock, hang watching, input checks,
results, progress). It imports no chapter."""
