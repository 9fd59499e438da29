"""The doctor's own process: the command line, the run and its judging, the ranks started and
watched, torchrun mode, bad input refused before anything starts."""
