"""Chapter 6, hangs and silent differences (``book/hangs.md``)."""
