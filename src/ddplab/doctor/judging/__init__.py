"""The ranks' evidence read back and judged: the checks' registry, one judge per family, the
findings and verdicts they give."""
