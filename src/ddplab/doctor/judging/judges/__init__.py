"""One judge per family of checks; each reads the evidence and returns its verdicts."""
