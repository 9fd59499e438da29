"""The diagnosis shown: a linter-style text report, JSON, and a self-contained page."""
