"""Matplotlib figures of experiment results: one module per chapter, no computation here."""
