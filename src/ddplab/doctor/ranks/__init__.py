"""What runs on every rank: the entry point, the watchers, the recorder, the reader's line."""
