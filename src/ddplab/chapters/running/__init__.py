"""Running the labs (``book/running.md``, lab 00): a first process group, checked."""
